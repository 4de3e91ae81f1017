"""SGLang's forward state for a whole GLM-5 decoder layer or the model:
the model as SGLang's dummy-weight loader builds it, the request and KV
pools, the attention backend SGLang selects for GLM-5 on this device, a
ForwardBatch for an extend (prefill) or a decode step, and the attention
metadata computed from it -- built the way SGLang's own attention test kit
builds them (a model runner with only the fields the backend reads).

Everything SGLang would compute from tensor values is computed here, from
the requested shapes, before anything is traced; ``values`` lists each such
value and what was used (the findings carry it). See docs/design.md,
"Whole decoder layers and the model".
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets.glm5.sglang import runtime

# A decode step's requests each hold this many tokens (prompt + generated):
# past the DSA indexer's top-k (2048 for GLM-5), so the indexer scores keys
# as it does for a long request rather than taking them all.
DECODE_CONTEXT = 4096

# SGLang settings the doctor makes, each a documented SGLang environment
# variable, and why.
SETTINGS = {
    "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": (
        "1", "DeepGEMM (the indexer's MQA-logits kernels) is not installed here: SGLang's torch path for them"),
    "SGLANG_OPT_USE_TOPK_V2": (
        "0", "the v2 top-k plans its launch with an occupancy query to the CUDA driver at metadata time: "
             "SGLang's v1 top-k kernel (same sgl-kernel op family)"),
}


def settings(log: UndoLog) -> list[str]:
    """Make SGLANG's settings above (undone with ``log``); one line each."""
    for name, (value, _) in SETTINGS.items():
        log.setenv(name, value)
    return [f"{name}={value}: {why}" for name, (value, why) in SETTINGS.items()]


def layer_kinds(hf_config: Any, count: int) -> list[tuple]:
    """What makes decoder layer i of ``count`` a kind of its own: its MLP (dense
    or MoE) and whether its DSA indexer reuses the previous layer's top-k."""
    layer_cls = importlib.import_module("sglang.srt.models.deepseek_v2").DeepseekV2DecoderLayer
    skips = runtime.optional("sglang.srt.configs.model_config:dsa_layer_skips_topk")
    # SGLang's own rule: a static method of the config, or (older releases) a
    # method that reads self.config.
    static = isinstance(inspect.getattr_static(layer_cls, "_is_layer_sparse"), staticmethod)
    owner = hf_config if static else SimpleNamespace(config=hf_config)
    out = []
    for i in range(count):
        sparse = layer_cls._is_layer_sparse(owner, i, is_nextn=False)
        out.append((sparse, bool(skips(hf_config, i)) if skips is not None else False))
    return out


def reduced_layer_count(hf_config: Any) -> int:
    """The fewest leading layers that hold every kind the full model has."""
    kinds = layer_kinds(hf_config, hf_config.num_hidden_layers)
    wanted = set(kinds)
    for n in range(1, len(kinds) + 1):
        if set(kinds[:n]) == wanted:
            return n
    return len(kinds)


def build_model(rt: runtime.Runtime, layers: int) -> torch.nn.Module:
    """GlmMoeDsaForCausalLM with ``layers`` decoder layers, through SGLang's
    dummy-weight loader (``--load-format dummy``: build, fill, post-load,
    post-process each quantized module). Call inside the platform window."""
    _, loader_cls = runtime.require("sglang.srt.model_loader.loader:DummyModelLoader")
    _, load_config_cls = runtime.require("sglang.srt.configs.load_config:LoadConfig")
    _, device_config_cls = runtime.require("sglang.srt.configs.device_config:DeviceConfig")
    rt.model_config.hf_config.num_hidden_layers = layers
    loader = loader_cls(load_config_cls(load_format="dummy"))
    return loader.load_model(model_config=rt.model_config, device_config=device_config_cls("cuda"))


@dataclass
class ForwardState:
    runner: Any
    backend: Any
    batch: Any
    # Each value SGLang computes from tensors, and what was used ("name: value").
    values: list[str] = field(default_factory=list)

    def context(self) -> Any:
        """SGLang's forward context around a forward of this batch (releases
        before it carry the backend and the pools on the batch: nothing)."""
        context = runtime.optional("sglang.srt.model_executor.forward_context:forward_context")
        if context is None:
            return contextlib.nullcontext()
        make = runtime.optional("sglang.srt.model_executor.forward_context:ForwardContext")
        # (Older releases take no batch.)
        return runtime.call(context, make(attn_backend=self.backend), forward_batch=self.batch)


def resolved(server_args: Any, name: str) -> Any:
    """A server argument as the release resolved it: through its record of
    overrides where it keeps one (newer releases resolve some fields lazily),
    else the field itself."""
    lookup = runtime.optional("sglang.srt.arg_groups.overrides:resolution_result")
    return lookup(server_args, name) if lookup is not None else getattr(server_args, name, None)


def _runner(rt: runtime.Runtime, layers: int, batch_size: int, context_len: int, page: int) -> Any:
    """A model runner with what the attention backend and the KV pools read
    (SGLang's attention test kit makes its runner the same way)."""
    _, runner_cls = runtime.require("sglang.srt.model_executor.model_runner:ModelRunner")
    pools = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    config = importlib.import_module("sglang.srt.configs.model_config")
    server_args, model_config = rt.server_args, rt.model_config
    hf = model_config.hf_config
    kv_dtype_name = str(resolved(server_args, "kv_cache_dtype") or "auto")
    kv_dtype = torch.float8_e4m3fn if kv_dtype_name == "fp8_e4m3" else model_config.dtype

    class Runner(runner_cls):
        def __init__(self) -> None:  # no device, no weights, no memory profiling
            pass

    runner = Runner()
    runner.__dict__.update(
        device="cuda", gpu_id=0, dtype=model_config.dtype, model_config=model_config, server_args=server_args,
        kv_cache_dtype=kv_dtype, kv_cache_dtype_str=kv_dtype_name, page_size=page, is_draft_worker=False,
        draft_attention_backend=None, canary_manager=None, _kernel_warmed_up=True, hisparse_coordinator=None,
        attention_chunk_size=None, init_new_workspace=False, is_hybrid_swa=False, use_mla_backend=True,
        prefill_attention_backend_str="dsa", decode_attention_backend_str="dsa", max_running_requests=batch_size)
    runner.req_to_token_pool = pools.ReqToTokenPool(size=batch_size, max_context_len=context_len, device="cuda",
                                                    enable_memory_saver=False)
    # The sparse-attention KV pool: DSA in newer releases, NSA (the same
    # layout under its earlier name) in older ones, whose model runner
    # computes the KV cache width itself.
    dsa = hasattr(pools, "DSATokenToKVPool")
    if dsa:
        _, kv_dim = runtime.require("sglang.srt.mem_cache.kv_cache_configurator:calculate_mla_kv_cache_dim")
        width = kv_dim(model_config=model_config, kv_cache_dtype=kv_dtype)
        index = {"index_head_dim": config.get_dsa_index_head_dim(hf), "index_kpool": config.get_dsa_index_kpool(hf),
                 "index_kpool_compress": config.get_dsa_index_kpool_compress(hf)}
    else:
        width = runner.calculate_mla_kv_cache_dim()
        index = {"index_head_dim": config.get_nsa_index_head_dim(hf)}
    runner.token_to_kv_pool = runtime.call(
        pools.DSATokenToKVPool if dsa else pools.NSATokenToKVPool,
        page + batch_size * context_len, page_size=page, dtype=kv_dtype, kv_lora_rank=model_config.kv_lora_rank,
        qk_rope_head_dim=model_config.qk_rope_head_dim, layer_num=layers, device="cuda", kv_cache_dim=width,
        enable_memory_saver=False, start_layer=0, end_layer=layers, max_running_requests=batch_size, **index)
    runner.token_to_kv_pool_allocator = SimpleNamespace(page_size=page)
    if hasattr(runner, "init_kv_index_translator"):
        runner.init_kv_index_translator()
    return runner


def make_state(rt: runtime.Runtime, layers: int, phase: str, tokens: int) -> ForwardState:
    """The pools, backend, batch and metadata for ``tokens`` tokens: extend =
    one request of ``tokens`` new tokens (no cached prefix); decode =
    ``tokens`` requests of one new token each, ``DECODE_CONTEXT`` long."""
    batch_info = importlib.import_module("sglang.srt.model_executor.forward_batch_info")
    if phase == "decode":
        mode, seq_lens, new = batch_info.ForwardMode.DECODE, [DECODE_CONTEXT] * tokens, [1] * tokens
    else:
        mode, seq_lens, new = batch_info.ForwardMode.EXTEND, [tokens], [tokens]
    prefix = [s - n for s, n in zip(seq_lens, new)]
    batch_size = len(seq_lens)
    page = int(resolved(rt.server_args, "page_size") or 1)
    # Whole pages per request: the pool views its buffers page by page.
    context_len = -(-max(seq_lens) // page) * page
    runner = _runner(rt, layers, batch_size, context_len, page)
    name = str(resolved(rt.server_args, "attention_backend") or "dsa")
    # The backend as the model runner's own set-up makes it: per phase from
    # the resolved arguments (a hybrid where prefill and decode differ), and
    # in releases whose model code dispatches on them, the per-phase backend
    # names written back to the published server arguments.
    backend = runner._get_attention_backend()
    # The KV slots: each request owns a run of whole pages after page 0.
    slot = lambda request, position: page + request * context_len + position  # noqa: E731
    positions = [p for r in range(batch_size) for p in range(prefix[r], seq_lens[r])]
    out_cache_loc = [slot(r, p) for r in range(batch_size) for p in range(prefix[r], seq_lens[r])]
    cuda = lambda values, dtype: torch.tensor(values, dtype=dtype, device="cuda")  # noqa: E731
    batch = batch_info.ForwardBatch(
        forward_mode=mode, batch_size=batch_size, input_ids=torch.zeros(len(positions), dtype=torch.int64, device="cuda"),
        req_pool_indices=cuda(list(range(batch_size)), torch.int32), seq_lens=cuda(seq_lens, torch.int32),
        seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32), out_cache_loc=cuda(out_cache_loc, torch.int64),
        seq_lens_sum=sum(seq_lens), positions=cuda(positions, torch.int64))
    # What ForwardBatch.init_new does with the KV index translator: bind a
    # plan of the batch's own fields, or (older releases) rebind its write slots.
    # Releases before the forward context: the batch carries the pools and
    # the backend, as ForwardBatch.init_new copies them from the model runner.
    carried = {f.name for f in dataclasses.fields(batch_info.ForwardBatch)}
    for name, value in (("req_to_token_pool", runner.req_to_token_pool), ("token_to_kv_pool", runner.token_to_kv_pool),
                        ("attn_backend", backend)):
        if name in carried:
            setattr(batch, name, value)
    translator = getattr(runner, "kv_index_translator", None)
    if translator is not None:
        (getattr(translator, "bind_own_plan", None) or translator.rebind_write_loc)(batch)
    if mode.is_extend():
        batch.extend_prefix_lens, batch.extend_prefix_lens_cpu = cuda(prefix, torch.int32), prefix
        batch.extend_seq_lens, batch.extend_seq_lens_cpu = cuda(new, torch.int32), new
        batch.extend_num_tokens = len(positions)
    state = ForwardState(runner, backend, batch)
    with state.context():
        backend.init_forward_metadata(batch)
    impl = _sparse_backend(rt.server_args, "decode" if phase == "decode" else "prefill")
    state.values = [
        f"forward mode: {mode.name} ({batch_size} request{'s' if batch_size > 1 else ''}, {len(positions)} new "
        f"token{'s' if len(positions) > 1 else ''})",
        f"seq_lens (host copy the metadata reads): {_runs(seq_lens)}; cached prefix: {_runs(prefix)}",
        f"positions: {prefix[0]}..{seq_lens[0] - 1} per request",
        f"KV slots (out_cache_loc, req_to_token): request r, position p -> {page} + r*{context_len} + p "
        "(whole pages per request; the table on the fake device holds no values)",
        f"KV cache: {runner.kv_cache_dtype_str} ({runner.token_to_kv_pool.kv_cache_dim} bytes per token), "
        f"page size {page}, {layers} layers",
        f"attention backend: {name} ({impl} for {phase}), chosen by SGLang's set-up for this device",
        "attention metadata: computed by the backend's init_forward_metadata from this batch, before tracing",
    ]
    return state


def _sparse_backend(server_args: Any, phase: str) -> str:
    """The kernel backend the DSA (older releases: NSA) attention chose for a phase."""
    context = runtime.optional("sglang.srt.runtime_context:get_exec")
    if context is not None:
        return str(getattr(context().kernel, f"dsa_{phase}_backend"))
    return str(resolved(server_args, f"nsa_{phase}_backend"))


def _runs(values: list[int]) -> str:
    return f"{values[0]} x {len(values)}" if len(set(values)) == 1 and len(values) > 1 else str(values)


class DecoderLayerCall(torch.nn.Module):
    """One decoder layer called as SGLang's model calls it: a fresh residual
    stream (what the model starts before its first layer) and the layer's
    scratch allocator, then the layer."""

    def __init__(self, layer_model: torch.nn.Module, index: int) -> None:
        super().__init__()
        self.layer = layer_model.layers[index]
        self._stack = len(layer_model.layers)
        # Looked up once: the traced forward calls them, never imports.
        self._start = importlib.import_module("sglang.srt.layers.layer_boundary.residual.batch").start
        self._allocator = importlib.import_module("sglang.srt.models.deepseek_v2").BumpAllocator

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, forward_batch: Any) -> Any:
        self._start(forward_batch)
        zero_allocator = self._allocator(buffer_size=self._stack * 2, dtype=torch.float32, device=positions.device)
        return self.layer(positions, hidden_states, forward_batch, zero_allocator)


__all__ = ["DECODE_CONTEXT", "DecoderLayerCall", "ForwardState", "SETTINGS", "build_model", "make_state",
           "reduced_layer_count", "settings"]

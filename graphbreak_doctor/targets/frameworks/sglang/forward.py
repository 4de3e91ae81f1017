"""SGLang's forward state for a whole decoder layer or the model: the model
as SGLang's dummy-weight loader builds it, the request and KV pools (the
DSA, MLA or MHA pool SGLang's KV-cache configurator builds for the model),
the attention backends SGLang resolved for each phase on this device, a
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
import importlib.util
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.targets.frameworks.sglang import runtime

# A decode step's requests each hold this many tokens (prompt + generated):
# past the DSA indexer's top-k (2048 for GLM-5), so the indexer scores keys
# as it does for a long request rather than taking them all.
DECODE_CONTEXT = 4096

# SGLang settings the doctor makes, each a documented SGLang environment
# variable, why, and when (None: always). DeepGEMM is one of SGLang's own
# requirements: where it is installed, its kernels are called as on the
# server (their library gets a stand-in, deep_gemm_libs.py); only where it
# is missing does the indexer take SGLang's torch path.
SETTINGS = {
    "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": (
        "1", "DeepGEMM (the indexer's MQA-logits kernels) is not installed here: SGLang's torch path for them",
        lambda: importlib.util.find_spec("deep_gemm") is None),
    "SGLANG_OPT_USE_TOPK_V2": (
        "0", "the v2 top-k plans its launch with an occupancy query to the CUDA driver at metadata time: "
             "SGLang's v1 top-k kernel (same sgl-kernel op family)", None),
}


def settings(log: UndoLog) -> list[str]:
    """Make SGLANG's settings above that apply here (undone with ``log``); one line each."""
    made = []
    for name, (value, why, when) in SETTINGS.items():
        if when is None or when():
            log.setenv(name, value)
            made.append(f"{name}={value}: {why}")
    return made


def build_model(rt: runtime.Runtime, layers: int) -> torch.nn.Module:
    """The model SGLang's registry resolves, with ``layers`` decoder layers, through SGLang's
    dummy-weight loader (``--load-format dummy``: build, fill, post-load,
    post-process each quantized module). Call inside the device."""
    _, loader_cls = runtime.require("sglang.srt.model_loader.loader:DummyModelLoader")
    _, load_config_cls = runtime.require("sglang.srt.configs.load_config:LoadConfig")
    _, device_config_cls = runtime.require("sglang.srt.configs.device_config:DeviceConfig")
    rt.model_config.hf_config.num_hidden_layers = layers
    loader = loader_cls(load_config_cls(load_format="dummy"))
    model = loader.load_model(model_config=rt.model_config, device_config=device_config_cls("cuda"))
    rt.model = model  # a model runner holds its model, and attention backends read it while they are made
    return model


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
    (SGLang's attention test kit makes its runner the same way), its fields
    decided as SGLang's model runner decides them: MLA or not from the
    config's attention architecture, the KV cache dtype (``kv_cache_dtype``),
    the per-phase attention backends (``attention_backends``) and the KV
    pool (``kv_pool``)."""
    _, runner_cls = runtime.require("sglang.srt.model_executor.model_runner:ModelRunner")
    pools = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    server_args, model_config = rt.server_args, rt.model_config
    model = rt.model
    kv_dtype_name, kv_dtype = kv_cache_dtype(rt, model)

    class Runner(runner_cls):
        def __init__(self) -> None:  # no device, no weights, no memory profiling
            pass

    runner = Runner()
    runner.__dict__.update(
        device="cuda", gpu_id=0, dtype=model_config.dtype, model_config=model_config, server_args=server_args,
        model=model, kv_cache_dtype=kv_dtype, kv_cache_dtype_str=kv_dtype_name, page_size=page, is_draft_worker=False,
        draft_attention_backend=None, canary_manager=None, _kernel_warmed_up=True, hisparse_coordinator=None,
        attention_chunk_size=getattr(model_config, "attention_chunk_size", None), init_new_workspace=False,
        is_hybrid_swa=bool(getattr(model_config, "is_hybrid_swa", False)), use_mla_backend=uses_mla(model_config),
        sliding_window_size=sliding_window(rt, model), spec_algorithm=_speculative(server_args),
        max_running_requests=batch_size)
    runner.prefill_attention_backend_str, runner.decode_attention_backend_str = attention_backends(runner)
    runner.req_to_token_pool = pools.ReqToTokenPool(size=batch_size, max_context_len=context_len, device="cuda",
                                                    enable_memory_saver=False)
    size = page + batch_size * context_len
    runner.token_to_kv_pool = kv_pool(runner, layers, size, page, batch_size)
    runner.token_to_kv_pool_allocator = _allocator(runner, size, page)
    if hasattr(runner, "init_kv_index_translator"):
        runner.init_kv_index_translator()
    return runner


def uses_mla(model_config: Any) -> bool:
    """The model runner's ``use_mla_backend``: the config's attention
    architecture is MLA."""
    _, arch = runtime.require("sglang.srt.configs.model_config:AttentionArch")
    return getattr(model_config, "attention_arch", None) == arch.MLA


def _speculative(server_args: Any) -> Any:
    """The runner's ``spec_algorithm``: SGLang's ``SpeculativeAlgorithm``
    of the published (older releases: the resolved) speculative algorithm."""
    _, algorithm = runtime.require("sglang.srt.speculative.spec_info:SpeculativeAlgorithm")
    spec = runtime.optional("sglang.srt.runtime_context:get_spec")
    return algorithm.from_string(getattr(spec(), "speculative_algorithm", None) if spec is not None
                                 else resolved(server_args, "speculative_algorithm"))


def sliding_window(rt: runtime.Runtime, model: Any) -> Any:
    """The runner's ``sliding_window_size``: SGLang's
    ``resolve_sliding_window_size`` of the built model and its config
    (releases without it: None). That function asks the model first: a model
    class with a window of its own, built elsewhere, is refused rather than
    given the config's."""
    resolve = runtime.optional("sglang.srt.model_executor.model_runner_components.load_model_utils:"
                               "resolve_sliding_window_size")
    if resolve is None:
        return None
    if model is None and hasattr(rt.model_cls, "get_attention_sliding_window_size"):
        raise TargetError(f"{rt.architecture} sets its attention window on the built model "
                          "(get_attention_sliding_window_size), which this forward state was not given")
    return resolve(model, rt.model_config)


def kv_cache_dtype(rt: runtime.Runtime, model: Any) -> tuple[str, torch.dtype]:
    """The KV cache dtype as SGLang's model runner configures it: SGLang's
    ``configure_kv_cache_dtype`` on the resolved ``--kv-cache-dtype`` and the
    built model (where it reads the quantization config; the set-up's when
    none was given), the runner's string its resolved name or else the
    argument. Releases without that function: FP8 for ``fp8_e4m3``, else the
    model's dtype."""
    name = str(resolved(rt.server_args, "kv_cache_dtype") or "auto")
    configure = runtime.optional("sglang.srt.mem_cache.kv_cache_dtype:configure_kv_cache_dtype")
    if configure is None:
        return name, torch.float8_e4m3fn if name == "fp8_e4m3" else rt.model_config.dtype
    spec = runtime.optional("sglang.srt.runtime_context:get_spec")
    draft_dtype = getattr(spec(), "speculative_draft_kv_cache_dtype", None) if spec is not None else None
    holder = model if model is not None else SimpleNamespace(quant_config=rt.quant_config)
    chosen, dtype = runtime.call(
        configure, server_args_kv_cache_dtype=name, model=holder, model_dtype=rt.model_config.dtype,
        is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None,
        speculative_draft_kv_cache_dtype=draft_dtype)
    return (chosen if chosen is not None else name), dtype


def attention_backends(runner: Any) -> tuple[str, str]:
    """The (prefill, decode) attention backends this runner runs, as the
    model runner resolves them before it builds its backends: SGLang's
    ``resolve_attention_backend_strs`` where the release has it, else the
    server arguments' ``get_attention_backends`` (what older runners call
    while they build the backend), else the resolved arguments."""
    resolve = runtime.optional(
        "sglang.srt.model_executor.model_runner_components.attention_backend_setup:resolve_attention_backend_strs")
    if resolve is not None:
        pair = resolve(model_runner=runner)
        return str(pair.prefill), str(pair.decode)
    server_args = runner.server_args
    if hasattr(server_args, "get_attention_backends"):
        prefill, decode = server_args.get_attention_backends()
        return str(prefill), str(decode)
    name = resolved(server_args, "attention_backend")
    return (str(resolved(server_args, "prefill_attention_backend") or name),
            str(resolved(server_args, "decode_attention_backend") or name))


def pool_kind(runner: Any) -> str:
    """Which token-to-KV pool SGLang's KV-cache configurator builds for this
    runner: "dsa", "mla" or "mha". The choice is made inside the
    configurator's pool builder (a method of a configurator made from a whole
    model runner); this is the same dispatch from the same inputs -- the
    runner's ``use_mla_backend`` and ``is_hybrid_swa``, SGLang's own tests of
    the config (DSA, DeepSeek-V4, hybrid linear attention, MiniMax sparse)
    and the KV cache dtype. The families the doctor does not build are a
    TargetError naming the pool."""
    hf = runner.model_config.hf_config
    config = importlib.import_module("sglang.srt.configs.model_config")
    is_dsa = getattr(config, "is_deepseek_dsa", None) or getattr(config, "is_deepseek_nsa", None)
    test = lambda name: bool(getattr(config, name, lambda _hf: False)(hf))  # noqa: E731
    mambaish = runtime.optional("sglang.srt.configs.hybrid_arch:mambaish_config")
    hybrid_linear = mambaish is not None and mambaish(runner.model_config) is not None
    fp4 = "float4" in str(runner.kv_cache_dtype) or runner.kv_cache_dtype_str == "mxfp8"
    if test("is_deepseek_v4"):
        family = "DeepSeek-V4 KV pool"
    elif runner.is_hybrid_swa:
        family = "hybrid sliding-window KV pool"
    elif runner.use_mla_backend and not hybrid_linear:
        if is_dsa is not None and is_dsa(hf):
            return "dsa"
        if not fp4:
            return "mla"
        family = "FP4 MLA KV pool"
    elif test("is_minimax_sparse"):
        family = "MiniMax sparse-index KV pool"
    elif hybrid_linear:
        family = "hybrid linear-attention KV pool"
    elif fp4:
        family = f"{runner.kv_cache_dtype_str} MHA KV pool"
    else:
        return "mha"
    raise TargetError(f"SGLang builds the {family} for this model: the doctor builds only the DSA, MLA and MHA pools")


def kv_pool(runner: Any, layers: int, size: int, page: int, batch_size: int) -> Any:
    """The token-to-KV pool of ``size`` slots over ``layers`` layers, of the
    kind ``pool_kind`` says, sized and typed as the configurator builds it
    (the class a platform substitutes for the kind where it does)."""
    pools = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    model_config = runner.model_config
    kind = pool_kind(runner)
    common = dict(page_size=page, dtype=runner.kv_cache_dtype, layer_num=layers, device="cuda",
                  enable_memory_saver=False, start_layer=0, end_layer=layers)
    if kind == "dsa":
        return _dsa_pool(runner, model_config, size, batch_size, common)
    platform = runtime.optional("sglang.srt.platforms:current_platform")
    substitute = getattr(platform, "get_kv_pool_cls", None)
    pool_cls = substitute(kind=kind) if substitute is not None else None
    if kind == "mla":
        return runtime.call(pool_cls or pools.MLATokenToKVPool, size, kv_lora_rank=model_config.kv_lora_rank,
                            qk_rope_head_dim=model_config.qk_rope_head_dim, **common)
    memory = runtime.optional("sglang.srt.runtime_context:get_memory")
    page_major = memory is not None and bool(getattr(memory(), "enable_page_major_kv_layout", False))
    default = pools.PageMajorMHATokenToKVPool if page_major else pools.MHATokenToKVPool
    return runtime.call(pool_cls or default, size, head_num=model_config.get_num_kv_heads(1),
                        head_dim=model_config.head_dim, v_head_dim=getattr(model_config, "v_head_dim", None),
                        enable_alt_stream=True, enable_kv_cache_copy=False, **common)


def _allocator(runner: Any, size: int, page: int) -> Any:
    """The token-to-KV allocator over the runner's pool, as the configurator
    makes it for one rank's paged pool (no context parallelism, HiSparse or
    sharding): SGLang's ``TokenToKVPoolAllocator`` for page size 1, else the
    platform's paged allocator or ``PagedTokenToKVPoolAllocator``. Releases
    without them: a stand-in with the page size."""
    paged = runtime.optional("sglang.srt.mem_cache.allocator:PagedTokenToKVPoolAllocator")
    if paged is None:
        return SimpleNamespace(page_size=page)
    platform = runtime.optional("sglang.srt.platforms:current_platform")
    substitute = getattr(platform, "get_paged_allocator_cls", None)
    args = dict(dtype=runner.kv_cache_dtype, device="cuda", kvcache=runner.token_to_kv_pool, need_sort=False)
    token = runtime.optional("sglang.srt.mem_cache.allocator:TokenToKVPoolAllocator")
    if page == 1 and token is not None:
        return runtime.call(token, size, **args)
    return runtime.call((substitute() if substitute is not None else None) or paged, size, page_size=page, **args)


def _dsa_pool(runner: Any, model_config: Any, size: int, batch_size: int, common: dict) -> Any:
    """The sparse-attention KV pool: DSA in newer releases, NSA (the same
    layout under its earlier name) in older ones, whose model runner
    computes the KV cache width itself."""
    pools = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    config = importlib.import_module("sglang.srt.configs.model_config")
    hf = model_config.hf_config
    dsa = hasattr(pools, "DSATokenToKVPool")
    if dsa:
        _, kv_dim = runtime.require("sglang.srt.mem_cache.kv_cache_configurator:calculate_mla_kv_cache_dim")
        width = kv_dim(model_config=model_config, kv_cache_dtype=runner.kv_cache_dtype)
        index = {"index_head_dim": config.get_dsa_index_head_dim(hf), "index_kpool": config.get_dsa_index_kpool(hf),
                 "index_kpool_compress": config.get_dsa_index_kpool_compress(hf)}
    else:
        width = runner.calculate_mla_kv_cache_dim()
        index = {"index_head_dim": config.get_nsa_index_head_dim(hf)}
    return runtime.call(
        pools.DSATokenToKVPool if dsa else pools.NSATokenToKVPool, size, kv_lora_rank=model_config.kv_lora_rank,
        qk_rope_head_dim=model_config.qk_rope_head_dim, kv_cache_dim=width, max_running_requests=batch_size,
        **common, **index)


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
    name = str(resolved(rt.server_args, "attention_backend") or runner.prefill_attention_backend_str)
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
    for held, value in (("req_to_token_pool", runner.req_to_token_pool), ("token_to_kv_pool", runner.token_to_kv_pool),
                        ("attn_backend", backend)):
        if held in carried:
            setattr(batch, held, value)
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
    step = "decode" if phase == "decode" else "prefill"
    sparse = pool_kind(runner) == "dsa"
    impl = _sparse_backend(rt.server_args, step) if sparse else getattr(runner, f"{step}_attention_backend_str")
    state.values = [
        f"forward mode: {mode.name} ({batch_size} request{'s' if batch_size > 1 else ''}, {len(positions)} new "
        f"token{'s' if len(positions) > 1 else ''})",
        f"seq_lens (host copy the metadata reads): {_runs(seq_lens)}; cached prefix: {_runs(prefix)}",
        f"positions: {prefix[0]}..{seq_lens[0] - 1} per request",
        f"KV slots (out_cache_loc, req_to_token): request r, position p -> {page} + r*{context_len} + p "
        "(whole pages per request; the table on the fake device holds no values)",
        f"KV cache: {runner.kv_cache_dtype_str} ({_kv_layout(runner.token_to_kv_pool, sparse)}), "
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


def _kv_layout(pool: Any, sparse: bool) -> str:
    """What one token's KV entry in one layer of ``pool`` holds."""
    if sparse:  # the DSA pool's packed entry (FP8 latent, scales, rope)
        return f"{pool.kv_cache_dim} bytes per token"
    size = pool.dtype.itemsize
    if hasattr(pool, "kv_lora_rank"):  # MLA: one latent vector and the rope key, shared by every head
        return (f"{pool.__class__.__name__}: latent {pool.kv_lora_rank} + rope {pool.qk_rope_head_dim} = "
                f"{pool.kv_cache_dim} x {size} bytes per token per layer")
    width = pool.head_num * (pool.head_dim + pool.v_head_dim)
    return (f"{pool.__class__.__name__}: {pool.head_num} KV heads x (K {pool.head_dim} + V {pool.v_head_dim}) = "
            f"{width} x {size} bytes per token per layer")


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
           "settings"]

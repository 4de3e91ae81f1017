"""GLM-5-NVFP4 layer targets: config files, checkpoint-format weights at real
shapes (fake tensors), eager runs of dense / MoE layers on emulated SM120 and
SM100, tensor-parallel shards, and the opaque attention op in a Dynamo graph."""

from __future__ import annotations

import json

import pytest
import torch

from graphbreak_doctor.targets import Target
from graphbreak_doctor.targets.models import glm5
from graphbreak_doctor.targets.models.glm5 import ops
from graphbreak_doctor.targets.models.glm5.config import default_config_dir

try:
    from graphbreak_doctor.emulation import EmulatedDevice
except ImportError as exc:  # the emulation lands in its own change
    EmulatedDevice = None
    _EMULATION_ERROR = str(exc)
else:
    _EMULATION_ERROR = ""

needs_emulation = pytest.mark.skipif(EmulatedDevice is None, reason=f"graphbreak_doctor.emulation unavailable: {_EMULATION_ERROR}")

U8, FP8, FP32, BF16 = torch.uint8, torch.float8_e4m3fn, torch.float32, torch.bfloat16
ARCHS = ["sm120", "sm100"]


def _shape(t):
    return tuple(t.shape), t.dtype


# ------------------------------------------------------------------ config


def test_default_config_matches_glm5():
    cfg = glm5.load_config()
    assert cfg.path.endswith("graphbreak_doctor/targets/models/glm5/configs/config.json")
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.moe_intermediate_size) == (6144, 12288, 2048)
    assert (cfg.n_routed_experts, cfg.n_shared_experts, cfg.num_experts_per_tok) == (256, 1, 8)
    assert (cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim) == (2048, 512, 192, 64, 256)
    assert (cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk) == (32, 128, 2048)
    assert cfg.rope_theta == 1e6
    assert cfg.layer_indices("dense") == [0, 1, 2]
    assert cfg.layer_indices("moe") == list(range(3, 78))


def test_quant_profile_marks_what_the_checkpoint_quantizes():
    q = glm5.load_config().quant
    assert (q.quant_algo, q.group_size) == ("NVFP4", 16)
    for nvfp4 in ("model.layers.0.mlp.gate_proj", "model.layers.2.mlp.down_proj", "model.layers.3.mlp.experts", "model.layers.77.mlp.shared_experts"):
        assert q.is_nvfp4(nvfp4), nvfp4
    for bf16 in ("model.layers.0.self_attn.q_b_proj", "model.layers.5.self_attn.indexer.wk", "model.layers.3.mlp.gate", "lm_head", "model.embed_tokens", "model.layers.78.mlp.experts"):
        assert not q.is_nvfp4(bf16), bf16


def test_routed_experts_only_profile():
    cfg = glm5.load_config(quant_profile="hf_quant_config.routed-experts-only.json")
    assert cfg.quant.is_nvfp4("model.layers.3.mlp.experts")
    assert not cfg.quant.is_nvfp4("model.layers.3.mlp.shared_experts")
    assert not cfg.quant.is_nvfp4("model.layers.0.mlp.gate_proj")


def test_config_path_may_be_directory_or_file():
    a = glm5.load_config(default_config_dir())
    b = glm5.load_config(default_config_dir() / "config.json")
    assert a.values == b.values and a.quant == b.quant


_GLM_HEAD = {"architectures": ["GlmMoeDsaForCausalLM"], "hidden_size": 8}


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no GLM-5 config"),
        ("{not json", "not valid JSON"),
        (json.dumps({"architectures": ["LlamaForCausalLM"]}), "not a GlmMoeDsaForCausalLM"),
        (json.dumps(_GLM_HEAD), "lacks keys"),
    ],
)
def test_bad_config_raises_one_line_value_error(tmp_path, content, message):
    if content is not None:
        (tmp_path / "config.json").write_text(content)
        path = tmp_path
    else:
        path = tmp_path / "missing"
    with pytest.raises(ValueError, match=message) as info:
        glm5.load_config(path)
    assert "\n" not in str(info.value)


def test_bad_quant_profile_raises(tmp_path):
    (tmp_path / "config.json").write_text((default_config_dir() / "config.json").read_text())
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4", "group_size": 32}}))
    with pytest.raises(ValueError, match="group_size 16"):
        glm5.load_config(tmp_path)


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="'dense' or 'moe'"):
        glm5.build_layer("attention")
    with pytest.raises(ValueError, match="not a moe layer"):
        glm5.build_layer("moe", layer_index=1)
    with pytest.raises(ValueError, match="--tp 3 does not divide"):
        glm5.build_layer("dense", tp=3)
    with pytest.raises(ValueError, match="sm100 or sm120"):
        glm5.build_layer("dense", device="sm90")


# ----------------------------------------------------------- ops / Dynamo


def test_attention_ops_are_registered_with_fakes():
    for name in (ops.MLA_ATTENTION, ops.DSA_INDEXER_TOPK, ops.ALL_REDUCE):
        ns, op = name.split("::")
        packet = getattr(getattr(torch.ops, ns), op)
        assert torch._library.utils.has_fake_kernel(packet.default), name


def test_attention_ops_real_implementation_small():
    # The eager implementations are real computations (used on a real GPU).
    torch.manual_seed(0)
    t, h, d, r = 5, 2, 8, 4
    q, k, w = torch.randn(t, h, d), torch.randn(t, d), torch.rand(t, h)
    idx = torch.ops.graphbreak_doctor.dsa_indexer_topk(q, k, w, 8)
    assert idx.shape == (t, 8) and idx.dtype == torch.int32
    # causal: token i never selects a later position, and selects all of 0..i
    for i in range(t):
        chosen = sorted(int(x) for x in idx[i] if x >= 0)
        assert chosen == list(range(i + 1))
    out = torch.ops.graphbreak_doctor.mla_attention(torch.randn(t, h, d), torch.randn(t, h, r), torch.randn(t, d), torch.randn(t, r), idx, 0.5)
    assert out.shape == (t, h, d)
    # token 0 attends only to itself: output = its own latent
    kv0 = torch.ops.graphbreak_doctor.mla_attention(torch.randn(1, h, d), torch.randn(1, h, r), torch.ones(1, d), torch.randn(1, r), torch.tensor([[0, -1]], dtype=torch.int32), 1.0)
    assert torch.allclose(kv0, torch.ones(1, h, d))


@needs_emulation
@pytest.mark.parametrize("tp", [1, 4])
def test_attention_op_in_dynamo_graph(tp):
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with EmulatedDevice("sm120"):
        target = glm5.build_attention(tokens=16, tp=tp, layer_index=3)
        torch._dynamo.reset()
        hidden, residual = torch.compile(target.fn, backend=record, fullgraph=True)(*target.args)
    assert tuple(hidden.shape) == (16, 6144)
    assert len(graphs) == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any("graphbreak_doctor.mla_attention" in t for t in targets)
    assert any("graphbreak_doctor.dsa_indexer_topk" in t for t in targets)
    assert any("graphbreak_doctor.all_reduce" in t for t in targets) == (tp > 1)
    assert ops.MLA_ATTENTION in target.split_ops


# --------------------------------------------------- weights (checkpoint)


@needs_emulation
@pytest.mark.slow
@pytest.mark.flashinfer
def test_dense_checkpoint_shapes_sm120():
    with EmulatedDevice("sm120"):
        target = glm5.build_layer("dense", device="sm120")
        ckpt = target.fn.__self__.checkpoint_tensors()
        p = "model.layers.0"
        assert _shape(ckpt[f"{p}.mlp.gate_up_proj.weight"]) == ((24576, 3072), U8)
        assert _shape(ckpt[f"{p}.mlp.gate_up_proj.weight_scale"]) == ((24576, 384), FP8)
        assert _shape(ckpt[f"{p}.mlp.gate_up_proj.weight_scale_2"]) == ((2,), FP32)
        assert _shape(ckpt[f"{p}.mlp.gate_up_proj.input_scale"]) == ((2,), FP32)
        assert _shape(ckpt[f"{p}.mlp.down_proj.weight"]) == ((6144, 6144), U8)
        assert _shape(ckpt[f"{p}.mlp.down_proj.weight_scale"]) == ((6144, 768), FP8)
        assert _shape(ckpt[f"{p}.self_attn.fused_qkv_a_proj_with_mqa.weight"]) == ((2624, 6144), BF16)
        assert _shape(ckpt[f"{p}.self_attn.q_b_proj.weight"]) == ((16384, 2048), BF16)
        assert _shape(ckpt[f"{p}.self_attn.kv_b_proj.weight"]) == ((28672, 512), BF16)
        assert _shape(ckpt[f"{p}.self_attn.o_proj.weight"]) == ((6144, 16384), BF16)
        assert _shape(ckpt[f"{p}.self_attn.indexer.wq_b.weight"]) == ((4096, 2048), BF16)
        assert _shape(ckpt[f"{p}.self_attn.indexer.wk.weight"]) == ((128, 6144), BF16)
        assert _shape(ckpt[f"{p}.self_attn.indexer.weights_proj.weight"]) == ((32, 6144), BF16)
        mlp = target.fn.__self__.mlp
        # SGLang's swizzled, padded block scales and scalar alpha
        assert _shape(mlp.gate_up.weight_scale_interleaved) == ((24576, 384), FP8)
        assert _shape(mlp.gate_up.alpha) == ((), FP32)
        assert all(type(t).__name__ == "FakeTensor" for t in ckpt.values())


@needs_emulation
@pytest.mark.slow
@pytest.mark.flashinfer
@pytest.mark.parametrize("device, fused", [("sm120", True), ("sm100", False)])
def test_moe_checkpoint_shapes(device, fused):
    with EmulatedDevice(device):
        target = glm5.build_layer("moe", device=device)
        layer = target.fn.__self__
        ckpt = layer.checkpoint_tensors()
        p = "model.layers.3.mlp"
        assert _shape(ckpt[f"{p}.experts.w13_weight"]) == ((256, 4096, 3072), U8)
        assert _shape(ckpt[f"{p}.experts.w13_weight_scale"]) == ((256, 4096, 384), FP8)
        assert _shape(ckpt[f"{p}.experts.w13_weight_scale_2"]) == ((256, 2), FP32)
        assert _shape(ckpt[f"{p}.experts.w2_weight"]) == ((256, 6144, 1024), U8)
        assert _shape(ckpt[f"{p}.experts.w2_weight_scale"]) == ((256, 6144, 128), FP8)
        assert _shape(ckpt[f"{p}.gate.weight"]) == ((256, 6144), BF16)
        assert _shape(ckpt[f"{p}.gate.e_score_correction_bias"]) == ((256,), FP32)
        kw = layer.mlp.kw
        assert target.info.facts["shared_expert_fused"] is fused
        if fused:
            # shared expert fused in as expert 257 (id 256)
            assert _shape(ckpt[f"{p}.shared_experts.w13_weight"]) == ((1, 4096, 3072), U8)
            assert layer.mlp.kernel_experts.w13_weight.shape[0] == 257
            assert _shape(kw.w13_blockscale_swizzled) == ((257, 4096, 384), FP8)
            assert _shape(kw.w2_blockscale_swizzled) == ((257, 6144, 128), FP8)
            assert _shape(kw.g1_alphas) == ((257,), FP32)
        else:
            assert _shape(ckpt[f"{p}.shared_experts.gate_up_proj.weight"]) == ((4096, 3072), U8)
            assert _shape(kw.gemm1_weights_fp4_shuffled) == ((256, 4096, 3072), U8)
            assert _shape(kw.g1_scale_c) == ((256,), FP32)


@needs_emulation
@pytest.mark.slow
@pytest.mark.flashinfer
@pytest.mark.parametrize("tp", [2, 4])
def test_tp_shards(tp):
    with EmulatedDevice("sm120"):
        dense = glm5.build_layer("dense", device="sm120", tp=tp)
        moe = glm5.build_layer("moe", device="sm120", tp=tp)
        d = dense.fn.__self__.checkpoint_tensors()
        m = moe.fn.__self__.checkpoint_tensors()
    assert tuple(d["model.layers.0.mlp.gate_up_proj.weight"].shape) == (2 * 12288 // tp, 3072)
    assert tuple(d["model.layers.0.mlp.down_proj.weight"].shape) == (6144, 12288 // tp // 2)
    assert tuple(d["model.layers.0.self_attn.q_b_proj.weight"].shape) == (64 // tp * 256, 2048)
    assert tuple(d["model.layers.0.self_attn.o_proj.weight"].shape) == (6144, 64 // tp * 256)
    assert tuple(d["model.layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight"].shape) == (2624, 6144)
    # experts stay whole at TP (no EP); their intermediate size is sharded
    assert tuple(m["model.layers.3.mlp.experts.w13_weight"].shape) == (256, 2 * 2048 // tp, 3072)
    assert tuple(m["model.layers.3.mlp.experts.w2_weight"].shape) == (256, 6144, 2048 // tp // 2)
    assert tuple(m["model.layers.3.mlp.experts.w2_weight_scale"].shape) == (256, 6144, 2048 // tp // 16)
    assert dense.info.shapes["tp"] == tp and dense.info.facts["attention_heads_per_rank"] == 64 // tp
    assert ops.ALL_REDUCE in dense.split_ops


# ------------------------------------------------------------ eager runs


@needs_emulation
@pytest.mark.slow
@pytest.mark.flashinfer_version
@pytest.mark.parametrize("device", ARCHS)
@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_layer_runs_eagerly(kind, device):
    import flashinfer

    with EmulatedDevice(device):
        target = glm5.build_layer(kind, device=device, tokens=64)
        assert isinstance(target, Target)
        hidden, residual = target.fn(*target.args, **target.kwargs)
    assert tuple(hidden.shape) == (64, 6144) and hidden.dtype == BF16
    assert tuple(residual.shape) == (64, 6144) and residual.dtype == BF16
    assert type(hidden).__name__ == "FakeTensor" and hidden.device.type == "cuda"
    meta = {**target.info.shapes, **target.info.facts}
    assert meta["layer_kind"] == kind and meta["device"] == device
    assert meta["layer_index"] == (0 if kind == "dense" else 3)
    assert meta["flashinfer_version"] == flashinfer.__version__
    assert meta["tokens"] == 64 and meta["hidden_size"] == 6144
    assert "nvfp4" in json.dumps(meta["weight_formats"])
    assert meta["weight_formats"]["attention"] == "bf16"
    calls = "\n".join(meta["flashinfer_calls"])
    if kind == "dense":
        assert "flashinfer.fp4_quantize" in calls and "flashinfer.mm_fp4" in calls
    elif device == "sm120":
        assert "cutlass_fused_moe" in calls and "trtllm" not in calls
    else:
        assert "trtllm_fp4_block_scale_moe" in calls and "cutlass_fused_moe" not in calls
    assert target.split_ops == (ops.MLA_ATTENTION,)
    json.dumps(meta)  # the findings carry it
    assert target.info.title == f"GLM-5 (GlmMoeDsaForCausalLM) {kind} layer {meta['layer_index']}"


@needs_emulation
@pytest.mark.slow
@pytest.mark.flashinfer_version
def test_mm_fp4_backend_follows_sglang_and_installed_flashinfer():
    import inspect

    import flashinfer

    with EmulatedDevice("sm120"):
        t120 = glm5.build_layer("dense", device="sm120", tokens=8)
    assert "backend='cutlass'" in "\n".join(t120.info.facts["flashinfer_calls"])
    has_backend = "backend" in inspect.signature(flashinfer.fp4_quantize).parameters
    assert ("fp4_quantize(x, input_scale_inv, backend=" in "\n".join(t120.info.facts["flashinfer_calls"])) == has_backend


# Run in a child process of its own: the peak RSS (a high-water mark) of a
# process that traced or built anything before would hide what the layer adds.
_PEAK_CHILD = """
import json, resource
from graphbreak_doctor.emulation import EmulatedDevice
from graphbreak_doctor.targets.models import glm5

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

with EmulatedDevice("sm120"):
    import flashinfer, flashinfer.fused_moe  # inside the device, as the layer's build imports them
    start = peak_mb()  # torch, FlashInfer and the emulation: imported and entered
    target = glm5.build_layer("moe", device="sm120")
    target.fn(*target.args)
    print(json.dumps({"start": start, "end": peak_mb()}))
"""


@needs_emulation
@pytest.mark.slow
@pytest.mark.flashinfer_version
def test_real_shapes_allocate_no_memory():
    import subprocess
    import sys

    from conftest import ROOT

    done = subprocess.run([sys.executable, "-c", _PEAK_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    peak = json.loads(done.stdout.strip().splitlines()[-1])
    grown_mb = peak["end"] - peak["start"]
    # One MoE layer's real NVFP4 experts are ~4.8 GB.
    assert grown_mb < 500, peak

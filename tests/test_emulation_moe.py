"""The rest of GLM-5's FlashInfer surface under EmulatedDevice: mm_fp4,
fused_topk_deepseek, cutlass_fused_moe (SM120) and trtllm_fp4_block_scale_moe
(SM100), eagerly and under Dynamo, on the installed FlashInfer (0.7.x or 0.6.x).
"""

from __future__ import annotations

import traceback

import pytest
import torch
from torch._dynamo import trace_rules

from graphbreak_doctor.emulation import EmulatedDevice, torch_surface
from graphbreak_doctor.emulation.flashinfer import artifact_mirror, caches
from test_emulation import (
    EMULATION_DIR,
    BreakLog,
    _assert_same,
    _snapshot,
    explain_run,
    fullgraph_run,
    needs_flashinfer,
)

pytestmark = [pytest.mark.flashinfer_version, needs_flashinfer]

# (target factory, device, output shapes/dtypes, JIT module names built+loaded)
CASES = [
    ("mm_fp4_dense", "sm120", [((16, 3072), torch.bfloat16)], {"fp4_gemm_cutlass_sm120"}),
    ("mm_fp4_cutlass", "sm100", [((16, 3072), torch.bfloat16)], {"fp4_gemm_cutlass"}),
    ("fused_topk_deepseek_glm5", "sm120", [((16, 8), torch.float32), ((16, 8), torch.int32)], {"dsv3_fused_routing"}),
    ("fused_topk_deepseek_glm5", "sm100", [((16, 8), torch.float32), ((16, 8), torch.int32)], {"dsv3_fused_routing"}),
    ("cutlass_fused_moe_glm5", "sm120", [((16, 6144), torch.bfloat16)], {"fused_moe_120"}),
    ("trtllm_fp4_block_scale_moe_glm5", "sm100", [((16, 6144), torch.bfloat16)], {"fused_moe_trtllm_sm100"}),
]
IDS = [f"{t}-{d}" for t, d, _, _ in CASES]


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("target,device,shapes,modules", CASES, ids=IDS)
def test_runs_dry_eagerly(target, device, shapes, modules):
    from fixtures import flashinfer_targets

    with EmulatedDevice(device) as dev:
        fn, args = getattr(flashinfer_targets, target)()
        outs = _outputs(fn(*args))
        assert all(type(o).__name__ == "FakeTensor" for o in outs)
        assert [(tuple(o.shape), o.dtype) for o in outs] == shapes
    built = {r.name for r in dev.jit_requests if r.action == "build"}
    loaded = {r.name for r in dev.jit_requests if r.action == "load"}
    assert built == modules and loaded == modules


def test_trtllm_moe_artifacts_are_downloaded_dry():
    from flashinfer import artifacts

    from fixtures.flashinfer_targets import trtllm_fp4_block_scale_moe_glm5

    pinned = artifacts.CheckSumHash.TRTLLM_GEN_BMM
    with EmulatedDevice("sm100") as dev:
        fn, args = trtllm_fp4_block_scale_moe_glm5()
        fn(*args)
    downloads = [r for r in dev.jit_requests if r.action == "download"]
    names = [r.name.rsplit("/", 1)[-1] for r in downloads]
    assert names[0] == "checksums.txt" and "flashinferMetaInfo.h" in names
    assert all(r.name.startswith(artifacts.ArtifactPath.TRTLLM_GEN_BMM.rstrip("/")) for r in downloads)
    # Downloads come before the build they feed, and the pin is restored.
    first_build = min(r.seq for r in dev.jit_requests if r.action == "build")
    assert max(r.seq for r in downloads) < first_build
    assert artifacts.CheckSumHash.TRTLLM_GEN_BMM == pinned


@pytest.mark.parametrize("target,device,shapes,modules", CASES, ids=IDS)
def test_traces_without_emulation_in_view(target, device, shapes, modules):
    from fixtures import flashinfer_targets

    crashes = []
    with EmulatedDevice(device):
        fn, args = getattr(flashinfer_targets, target)()
        try:
            log, backend, explain_warnings = explain_run(fn, args)
        except AssertionError as crash:
            # torch 2.13 Dynamo fails to build a resume function inside
            # FlashInfer 0.6.3's AutoTuner.choose_one (bytecode_transformation:
            # "exception table entry start instruction has no offset"): a
            # Dynamo bug on FlashInfer's code, not an emulation error. The
            # breaks logged before it still count.
            crashes.append("".join(traceback.format_exception(crash)))
            assert "torch/_dynamo/bytecode_transformation.py" in crashes[-1]
            log, explain_warnings = _last_log(), []
        error, full_log, _, full_warnings = fullgraph_run(fn, args)
    # FlashInfer's Python is traced and breaks (JIT loading, opaque kernels).
    assert log.with_stack(), target
    assert any("flashinfer/" in s for s in log.with_stack())
    assert error is not None  # fullgraph: FlashInfer's wrappers are not capturable
    texts = log.messages + full_log.messages + ["".join(traceback.format_exception(error))] + crashes
    texts += [f"{w.filename}:{w.lineno}: {w.message}" for w in explain_warnings + full_warnings]
    assert all(EMULATION_DIR not in t and "graphbreak_doctor.emulation" not in t for t in texts)
    assert "InternalTorchDynamoError" not in "".join(texts)


class _Recorder(BreakLog):
    last: "BreakLog | None" = None

    def __enter__(self):
        _Recorder.last = self
        return super().__enter__()


def _last_log() -> BreakLog:
    return _Recorder.last


@pytest.fixture(autouse=True)
def _remember_break_logs(monkeypatch):
    import test_emulation

    monkeypatch.setattr(test_emulation, "BreakLog", _Recorder)


def test_device_switch_is_classified_as_on_a_cuda_build():
    from torch._dynamo.variables import torch as dyn_torch
    from torch._dynamo.variables.ctx_manager import CUDADeviceVariable

    handlers = dyn_torch.TorchInGraphFunctionVariable._get_handlers()
    originals = {n: getattr(torch.cuda, n) for n in torch_surface.DEVICE_SWITCH}
    with EmulatedDevice("sm120"):
        for py_name, c_name in torch_surface.DEVICE_SWITCH.items():
            fn = getattr(torch.cuda, py_name)
            assert fn is getattr(torch._C, c_name)
            rule = trace_rules.torch_c_binding_in_graph_functions[f"torch._C.{c_name}"]
            assert trace_rules.lookup(fn) is rule
            if originals[py_name] in handlers:
                assert handlers[fn] is handlers[originals[py_name]]
        assert CUDADeviceVariable._exchange_fn is torch.cuda._exchange_device

        def fn(x):
            with torch.cuda.device(0):
                y = x + 1
            return y * 2

        x = torch.empty(4, device="cuda")
        error, log, backend, _ = fullgraph_run(fn, (x,))
    assert error is None and log.messages == []  # as on a GPU: in the graph
    assert "_cuda_exchangeDevice" in backend.graphs[0].code
    for name, original in originals.items():
        assert getattr(torch.cuda, name) is original
    assert CUDADeviceVariable._exchange_fn is originals["_exchange_device"]


def test_mem_pool_keeps_the_cpu_builds_dynamo_view():
    def fn(x):
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool, device=0):
            y = torch.empty(4, device="cuda")
        return x + y

    new_code = vars(torch._C._MemPool)["__new__"].__func__.__code__
    with EmulatedDevice("sm120"):
        x = torch.empty(4, device="cuda")
        assert fn(x).shape == (4,)  # eager works
        log, _, _ = explain_run(fn, (x,))
    stacks = log.with_stack()
    assert stacks and all(EMULATION_DIR not in s for s in log.messages)
    assert any("torch/_utils.py" in m for m in log.messages)  # the placeholder, as unemulated
    assert vars(torch._C._MemPool)["__new__"].__func__.__code__ is new_code
    with pytest.raises(RuntimeError, match="dummy base class"):
        torch.cuda.MemPool()


def test_exit_restores_everything_after_the_moe_targets():
    from flashinfer import artifacts
    from torch._dynamo.variables.ctx_manager import CUDADeviceVariable

    from fixtures import flashinfer_targets

    before = _snapshot()
    before["cuda_device_variable"] = (CUDADeviceVariable._exchange_fn, CUDADeviceVariable._maybe_exchange_fn)
    before["bmm_pin"] = artifacts.CheckSumHash.TRTLLM_GEN_BMM
    before["mirrors"] = list(artifact_mirror.STATE.mirrors)
    import flashinfer.utils as fi_utils

    before["scratch"] = {n: len(getattr(fi_utils, n, ())) for n in caches.SCRATCH}
    for device, target in (("sm120", "cutlass_fused_moe_glm5"), ("sm100", "trtllm_fp4_block_scale_moe_glm5"), ("sm120", "mm_fp4_dense")):
        with EmulatedDevice(device):
            fn, args = getattr(flashinfer_targets, target)()
            fn(*args)
    after = _snapshot()
    after["cuda_device_variable"] = (CUDADeviceVariable._exchange_fn, CUDADeviceVariable._maybe_exchange_fn)
    after["bmm_pin"] = artifacts.CheckSumHash.TRTLLM_GEN_BMM
    after["mirrors"] = list(artifact_mirror.STATE.mirrors)
    after["scratch"] = {n: len(getattr(fi_utils, n, ())) for n in caches.SCRATCH}
    _assert_same(before, after)


def _launcher_source() -> str:
    from pathlib import Path

    import flashinfer

    return (Path(flashinfer.__file__).parent / "data" / "csrc" / "trtllm_fused_moe_kernel_launcher.cu").read_text()


# FlashInfer 0.7 declares its launchers' return as Array<Optional<Tensor>>, one
# layout for all; before, each launcher class laid out its own Array<Tensor>.
DECLARES_LAYOUT = "Array<Optional<Tensor>> trtllm_fp4_block_scale_moe" in _launcher_source()


@pytest.mark.skipif(not DECLARES_LAYOUT, reason="this FlashInfer's launchers return per-class Array<Tensor> layouts")
def test_a_deferred_finalize_reads_back_the_launchers_own_tensors():
    """SGLang defers the MoE's finalize at small batches (``do_finalize=False``):
    FlashInfer then reads back, with ``torch.from_dlpack``, the tensors its
    launcher allocated. On the emulated B200 they are fake device tensors of
    the launcher's shapes, and torch's own ``from_dlpack`` is back after."""
    from fixtures.flashinfer_targets import GLM5_HIDDEN, GLM5_TOP_K, TOKENS, trtllm_fp4_block_scale_moe_glm5

    original = torch.from_dlpack
    with EmulatedDevice("sm100") as dev:
        fn, args = trtllm_fp4_block_scale_moe_glm5(do_finalize=False)
        gemm2, weights, permuted = fn(*args)
        assert all(type(t).__name__ == "FakeTensor" and t.device.type == "cuda" for t in (gemm2, weights, permuted))
        # 16 tokens x top-8 = 128 routed rows, at most one per expert of 256:
        # 128 CTAs of the launcher's default tile (8 rows) = 1024 padded rows.
        assert (tuple(gemm2.shape), gemm2.dtype) == ((1024, GLM5_HIDDEN), torch.bfloat16)
        assert tuple(weights.shape) == (TOKENS, GLM5_TOP_K)
        assert (tuple(permuted.shape), permuted.dtype) == ((TOKENS * GLM5_TOP_K,), torch.int32)
    assert torch.from_dlpack is original and torch.utils.dlpack.from_dlpack is original
    assert {r.name for r in dev.jit_requests if r.action == "load"} == {"fused_moe_trtllm_sm100"}


def test_the_launchers_answered_are_those_whose_signature_sizes_a_deferred_finalize():
    """Read from the installed FlashInfer's launcher source: every fused-MoE
    launcher that takes ``do_finalize`` answers, a routing-only entry point
    does not, and the parameters are where the release declares them. A
    release without the declared layout answers none (its capture stops at
    the read, as before)."""
    from graphbreak_doctor.emulation import host_build
    from graphbreak_doctor.emulation.flashinfer import launcher_outputs

    text = _launcher_source()
    exports = host_build.export_names(text)
    answered = launcher_outputs.answers_for(exports, text)
    if not DECLARES_LAYOUT:
        assert answered == {}
        return
    assert "trtllm_fp4_block_scale_moe" in answered
    assert all("_moe" in name and "routing" not in name for name in answered), sorted(answered)
    parameters = launcher_outputs.signatures(text)["trtllm_fp4_block_scale_moe"]
    assert parameters.index("hidden_states") < parameters.index("num_experts") < parameters.index("do_finalize")

"""EmulatedDevice: presets, the torch.cuda surface, dry FlashInfer JIT, undo, and
the issue-3 facts checked directly against real Dynamo and the installed FlashInfer.

FlashInfer-dependent tests are marked `flashinfer` (the 0.6.3 environment runs
`pytest -m flashinfer`); version-specific facts are selected by feature (does
`torch.ops.flashinfer.fp4_quantize` exist?), not by version string.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch._dynamo import trace_rules

from graphbreak_doctor.emulation import PRESETS, EmulatedDevice, resolve_device
from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation
from graphbreak_doctor.emulation import torch_surface
from graphbreak_doctor.emulation.flashinfer import caches, recorder

HAS_FLASHINFER = importlib.util.find_spec("flashinfer") is not None
needs_flashinfer = pytest.mark.skipif(not HAS_FLASHINFER, reason="flashinfer not installed")
EMULATION_DIR = "graphbreak_doctor/emulation"
GRAPH_BREAK_LOGGERS = (
    "torch._dynamo.symbolic_convert.__graph_breaks",
    "torch._dynamo.convert_frame.__graph_breaks",
    "torch._dynamo.exc.__graph_breaks",
)


def _has_fp4_op() -> bool:
    import flashinfer  # noqa: F401  (registers torch.ops.flashinfer.*)

    return hasattr(torch.ops.flashinfer, "fp4_quantize")


def _sm120_module_suffix() -> str:
    # FlashInfer 0.7 builds the SM12x family variant "120f" when CUDA >= 12.9
    # (quantization/fp4_quantization.py get_fp4_quantization_module); 0.6.3 has
    # no such variant and builds "120".
    import flashinfer

    fp4 = sys.modules.get("flashinfer.quantization.fp4_quantization") or sys.modules.get(
        "flashinfer.fp4_quantization"
    )
    assert fp4 is not None, flashinfer.__version__
    return "120f" if hasattr(fp4, "gen_fp4_quantization_sm120f_module") else "120"


class BreakLog:
    """Dynamo's graph-break artifact logs (docs/design.md, "Where Dynamo reports breaks"), as messages."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: self.messages.append(record.getMessage())
        self._handler = handler

    def __enter__(self) -> "BreakLog":
        torch._logging.set_logs(graph_breaks=True)
        for name in GRAPH_BREAK_LOGGERS:
            logging.getLogger(name).addHandler(self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for name in GRAPH_BREAK_LOGGERS:
            logging.getLogger(name).removeHandler(self._handler)
        torch._logging.set_logs()

    def with_stack(self) -> list[str]:
        return [m for m in self.messages if "User code traceback" in m]


class RecordingBackend:
    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def explain_run(fn, args):
    """Explain-style: compile allowing breaks, return (BreakLog, backend, warnings)."""
    torch._dynamo.reset()
    backend = RecordingBackend()
    with warnings.catch_warnings(record=True) as caught, BreakLog() as log:
        warnings.simplefilter("always")
        torch.compile(fn, backend=backend)(*args)
    return log, backend, caught


def fullgraph_run(fn, args):
    """Fullgraph: return (exception or None, BreakLog, backend, warnings)."""
    torch._dynamo.reset()
    backend = RecordingBackend()
    error = None
    with warnings.catch_warnings(record=True) as caught, BreakLog() as log:
        warnings.simplefilter("always")
        try:
            torch.compile(fn, fullgraph=True, backend=backend)(*args)
        except torch._dynamo.exc.Unsupported as e:
            error = e
    return error, log, backend, caught


# ------------------------------------------------------------------ presets


def test_presets_match_the_issue():
    sm120, sm100, sm90, h200 = PRESETS["sm120"], PRESETS["sm100"], PRESETS["sm90"], PRESETS["h200"]
    assert (h200.capability, h200.sms, h200.memory_gb, h200.device_name) == ((9, 0), 132, 141, "NVIDIA H200")
    assert (sm120.capability, sm120.sms, sm120.smem_optin_kib, sm120.memory_gb) == ((12, 0), 188, 99, 96)
    assert (sm100.capability, sm100.sms, sm100.smem_optin_kib, sm100.memory_gb) == ((10, 0), 148, 227, 180)
    assert (sm90.capability, sm90.sms, sm90.smem_optin_kib) == ((9, 0), 132, 227)
    assert all(p.cuda for p in (sm120, sm100, sm90))
    assert resolve_device(None) is sm120
    assert not PRESETS["cuda"].emulated and not PRESETS["cpu"].emulated


def test_unknown_device_is_a_one_line_value_error():
    with pytest.raises(ValueError) as info:
        EmulatedDevice("sm999")
    message = str(info.value)
    assert "\n" not in message
    for name in ("sm120", "sm100", "sm90", "cuda", "cpu"):
        assert name in message


def test_describe_is_plain_json():
    import json

    with EmulatedDevice("sm100") as dev:
        inside = dev.describe()
    assert json.loads(json.dumps(inside)) == inside
    assert inside["name"] == "sm100" and inside["emulated"] is True
    assert inside["capability"] == "10.0" and inside["sms"] == 148
    assert EmulatedDevice("cpu").describe()["emulated"] is False


# ------------------------------------------------------------ torch surface


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_fake_cuda_tensors_allocate_no_memory():
    before = _rss_kib()
    with EmulatedDevice("sm120"):
        # One GLM-5 MoE layer's w13 experts: 256 x 4096 x 3072 bytes = 3 GiB.
        w13 = torch.empty(256, 4096, 3072, dtype=torch.uint8, device="cuda")
        y = torch.empty(8192, 6144, dtype=torch.bfloat16, device="cuda") @ torch.empty(
            6144, 12288, dtype=torch.bfloat16, device="cuda"
        )
        assert str(w13.device) == "cuda:0" and type(w13).__name__ == "FakeTensor"
        assert y.shape == (8192, 12288)
        grown = _rss_kib() - before
    assert grown < 200 * 1024, f"RSS grew by {grown} KiB"


def test_the_device_keeps_what_the_host_wrote_and_what_it_computed_from_it():
    """A host tensor copied to the device keeps its values (through dtype
    conversions and views), and so does what the device computes from such
    values alone: tensor repeats give repeat_interleave its output size and
    .item() reads back, as on a GPU. A value that depends on one the host
    never wrote stays unknown: the data-dependent errors of fake tensors."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    with EmulatedDevice("sm120"):
        lens = torch.tensor([3, 5], dtype=torch.int32, device="cuda")
        starts = torch.arange(2, device="cuda")
        assert torch.repeat_interleave(starts, lens).shape == (8,)
        assert torch.repeat_interleave(starts, lens.to(torch.int64).detach().view(2)).shape == (8,)
        assert torch.tensor([7]).cuda().item() == 7
        assert torch.repeat_interleave(starts, lens + 1).shape == (10,)  # computed from known values
        assert torch.unique(lens * 0).numel() == 1  # an output shape that depends on the values
        flat = lens.view(1, 2)
        assert flat[0, 1].item() == 5
        lens.add_(1)
        assert lens[1].item() == 6
        assert flat[0, 1].item() == 6  # another view of the memory written: never stale
        with pytest.raises(DynamicOutputShapeException):  # made on the device, never written: not known
            torch.repeat_interleave(lens, torch.empty(2, dtype=torch.int64, device="cuda"))
        total = torch.empty(2, dtype=torch.int32, device="cuda")
        torch.add(lens, lens, out=total)  # written through a keyword argument
        assert total.tolist() == [8, 12]
        lens.add_(torch.empty(2, dtype=torch.int32, device="cuda"))
        with pytest.raises(DataDependentOutputException):  # written with unknown values: no longer known
            lens[0].item()
        with pytest.raises(DataDependentOutputException):  # nor is any other view of it
            flat[0, 1].item()


def test_an_index_buffer_built_on_the_device_is_known_on_the_host():
    """What an attention backend does before it plans a batch: a zeroed
    device buffer, per-request offsets written into a slice of it, the whole
    copied to the host (``qo_indptr[1:] = cumsum(lens)``; ``qo_indptr.to("cpu")``).
    The copy holds the device's values, as on the GPU."""
    with EmulatedDevice("sm120") as device:
        lens = torch.tensor([3, 5, 2], dtype=torch.int32, device="cuda")
        indptr = torch.zeros(4, dtype=torch.int32, device="cuda")
        assert device.fake_mode.written(indptr).tolist() == [0, 0, 0, 0]
        indptr[1:] = torch.cumsum(lens, dim=0)
        assert indptr.to("cpu").tolist() == [0, 3, 8, 10]
        staged = torch.empty(4, dtype=torch.int32, pin_memory=True)
        staged.copy_(indptr, non_blocking=True)
        assert staged.tolist() == [0, 3, 8, 10] and int(indptr[-1]) == 10
        grid = torch.zeros(3, 3, device="cuda")
        grid[:, 1] = torch.arange(3, device="cuda", dtype=torch.float32)  # a strided slice
        assert grid.cpu()[:, 1].tolist() == [0.0, 1.0, 2.0] and torch.zeros_like(lens).cpu().tolist() == [0, 0, 0]


def test_a_write_forgets_only_live_views_of_its_own_memory():
    """The device keeps a tensor's known values by the tensor's id and its
    memory's address, and Python and the allocator reuse both once freed:
    a key a dead tensor left under an address (an id a new tensor now has)
    must not make a write there forget the new tensor's values. Here the
    key is left by hand, where churn would leave it by chance."""
    from torch._subclasses.fake_tensor import DataDependentOutputException

    with EmulatedDevice("sm120") as dev:
        memory = dev.fake_mode
        kept = torch.tensor([-0.5], device="cuda")
        other = torch.tensor([1.0], device="cuda")
        memory._by_storage[other.untyped_storage()._cdata].add(id(kept))  # a stale key
        other.add_(1)
        assert kept.item() == -0.5 and bool(kept < 0)
        view = other.view(1, 1)
        assert view[0, 0].item() == 2.0
        other.add_(1)
        assert view[0, 0].item() == 3.0  # a live view of the memory written: written too
        other.add_(torch.empty(1, device="cuda"))
        with pytest.raises(DataDependentOutputException):  # written with unknown values: forgotten
            view[0, 0].item()


def test_a_large_device_tensor_is_known_by_the_range_its_fill_put_it_in():
    """A weight loader's checks on what it filled (a NaN test, a sign test)
    read back exact answers from the fill's range; what the range does not
    decide stays a data-dependent error."""
    from torch._subclasses.fake_tensor import DataDependentOutputException

    with EmulatedDevice("sm100"):
        scale = torch.empty(1 << 20, dtype=torch.float8_e4m3fn, device="cuda")
        staged = torch.empty_like(scale, dtype=torch.float16)
        staged.uniform_(-1.0, 1.0)
        scale.copy_(staged)
        assert not torch.isnan(scale.float()).any()
        assert torch.isfinite(scale.float()).all().item() is True
        assert not torch.isinf(torch.zeros(1 << 20, device="cuda")).any()
        assert (staged > -2).all()
        with pytest.raises(DataDependentOutputException):  # the range does not decide the sign
            bool((staged > 0).any())
        with pytest.raises(DataDependentOutputException):  # an unfilled tensor's values are not known
            bool(torch.isnan(torch.empty(1 << 20, device="cuda")).any())
        staged.mul_(2)  # written by an operator with no rule: its range is gone
        with pytest.raises(DataDependentOutputException):
            bool(torch.isnan(staged).any())
        nan = torch.full((1 << 20,), float("nan"), device="cuda")
        with pytest.raises(DataDependentOutputException):  # not finite: no range
            bool(torch.isnan(nan).any())


def test_flashmla_stand_ins_answer_with_their_kernels_output_shapes():
    """FlashMLA's dry answers (sgl-kernel's flashmla_ops, older releases'
    sparse attention): the shapes its docstrings give, on the inputs' device."""
    from graphbreak_doctor.targets.frameworks.sglang.sgl_kernel_libs import EXTENSION_DRY

    dry = EXTENSION_DRY["flashmla_ops"]
    with EmulatedDevice("sm120"):
        lens = torch.empty(16, dtype=torch.int32, device="cuda")
        schedule, splits = dry["get_mla_decoding_metadata"](lens, 128, 1, 128, True, 2048)
        assert schedule.shape == (188 // 1 // 2, 8) and splits.shape == (17,)
        assert schedule.dtype == splits.dtype == torch.int32 and schedule.device.type == "cuda"
        q = torch.empty(16, 1, 128, 576, dtype=torch.float8_e4m3fn, device="cuda")
        out, lse = dry["fwd_kvcache_mla"](q, torch.empty(64, 64, 1, 656, dtype=torch.uint8, device="cuda"), 512)
        assert out.shape == (16, 1, 128, 512) and out.dtype == torch.bfloat16 and lse.shape == (16, 128, 1)
        q = torch.empty(128, 64, 576, dtype=torch.bfloat16, device="cuda")
        out, max_logits, lse = dry["sparse_prefill_fwd"](q, torch.empty(256, 1, 576, dtype=torch.bfloat16,
                                                                          device="cuda"),
                                                          torch.empty(128, 1, 2048, dtype=torch.int32, device="cuda"),
                                                          0.1, 512)
        assert out.shape == (128, 64, 512) and max_logits.shape == lse.shape == (128, 64)


@pytest.mark.parametrize("name", ["sm120", "sm100", "sm90"])
def test_torch_cuda_surface_reports_the_preset(name):
    preset = PRESETS[name]
    here = torch.cuda.is_available()
    with EmulatedDevice(name):
        props = torch.cuda.get_device_properties(0)
        assert torch.cuda.is_available() is True
        assert torch.cuda.get_device_capability() == preset.capability
        assert (props.major, props.minor) == preset.capability
        assert props.multi_processor_count == preset.sms
        assert props.shared_memory_per_block_optin == preset.smem_optin_kib * 1024
        assert torch.cuda.get_device_name(torch.device("cuda:0")) == preset.device_name
        assert torch.cuda.device_count() == preset.node_gpus and torch.cuda.current_device() == 0
        assert torch.cuda.get_device_name(preset.node_gpus - 1) == preset.device_name
        assert torch.version.cuda == preset.cuda
        with pytest.raises(AssertionError):
            torch.cuda.get_device_properties(preset.node_gpus)
    assert torch.cuda.is_available() is here


def test_a_launch_wider_than_the_server_gets_a_node_of_its_size():
    with EmulatedDevice("sm120", gpus=16) as device:
        assert device.gpus == 16 and torch.cuda.device_count() == 16
        assert len(torch.cuda.default_generators) == 16 or torch.backends.cuda.is_built()
    with EmulatedDevice("sm120", gpus=2):
        assert torch.cuda.device_count() == PRESETS["sm120"].node_gpus


def test_free_memory_is_the_total_less_what_live_device_tensors_hold():
    """mem_get_info answers as on the GPU at start-up (the total less the
    CUDA context), then less what the live device tensors hold."""
    gib, mib = 1024**3, 1024**2
    preset = PRESETS["sm90"]
    with EmulatedDevice("sm90"):
        start, total = torch.cuda.mem_get_info()
        assert total == torch.cuda.get_device_properties(0).total_memory == preset.total_memory_mib * mib
        assert start == total - preset.context_mib * mib
        weights = torch.empty(gib, dtype=torch.uint8, device="cuda")
        view = weights[: gib // 2].view(torch.bfloat16)  # the same memory: counted once
        host = torch.empty(gib // 4, dtype=torch.uint8)  # host memory: not the GPU's
        assert torch.cuda.mem_get_info() == (start - gib, total)
        assert torch.cuda.mem_get_info(1) == (start, total)  # another GPU of the node
        del weights
        assert torch.cuda.mem_get_info()[0] == start - gib  # the view still holds it
        del view, host
        assert torch.cuda.mem_get_info() == (start, total)


def test_dynamo_saves_and_restores_the_emulated_cuda_rng_state_around_a_frame():
    """Around every frame it compiles, Dynamo saves the CUDA generator's state
    when CUDA is available and puts it back; the emulated device holds one."""
    def fn(x):
        return x + 1

    with EmulatedDevice("sm100"):
        state = torch.cuda.get_rng_state()
        assert state.dtype == torch.uint8 and state.numel() == 16
        compiled = torch.compile(fn, backend="eager", fullgraph=True)
        assert compiled(torch.empty(4, device="cuda")).device.type == "cuda"
        assert torch.equal(torch.cuda.get_rng_state(), state)


@pytest.mark.parametrize("name", ["sm120", "sm100", "sm90"])
def test_traced_code_that_asks_the_gpu_about_itself_gets_the_presets_answers(name):
    """Dynamo folds is_available() and get_device_capability() into the graph
    as constants, as on the GPU: the branch taken is the preset's. A query
    whose result is not a tensor and that Dynamo does not fold breaks as on
    the GPU ("torch.* op returned non-Tensor")."""
    from torch._dynamo.exc import Unsupported

    def by_capability(x):
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(x.device)
            return x.new_empty(major * 10 + minor)
        return x

    def by_name(x):
        return x * len(torch.cuda.get_device_name())

    preset = PRESETS[name]
    with EmulatedDevice(name):
        x = torch.empty(4, device="cuda")
        torch._dynamo.reset()
        out = torch.compile(by_capability, backend="eager", fullgraph=True)(x)
        assert out.shape == (preset.major * 10 + preset.minor,)
        torch._dynamo.reset()
        with pytest.raises(Unsupported, match="non-Tensor"):
            torch.compile(by_name, backend="eager", fullgraph=True)(x)
    torch._dynamo.reset()


def test_every_emulated_function_keeps_its_dynamo_classification():
    originals = torch_surface.originals()
    tables = torch_surface.dynamo_tables()
    with EmulatedDevice("sm120"):
        for name in torch_surface.EMULATED_NAMES:
            replacement = getattr(torch.cuda, name)
            original = originals[name]
            assert replacement is not original, name
            assert trace_rules.lookup(replacement) is trace_rules.lookup(original), name
            for table in tables:
                assert (replacement in table) == (original in table), name
                if original in table:
                    assert table[replacement] is table[original], name
        for name in torch_surface.C_NAMES:
            # Missing from a CPU build; on a GPU build this is the real binding.
            rule = trace_rules.torch_c_binding_in_graph_functions[f"torch._C.{name}"]
            assert trace_rules.lookup(getattr(torch._C, name)) is rule, name
    for name in torch_surface.EMULATED_NAMES:
        assert getattr(torch.cuda, name) is originals[name]
        # The rule map still maps the real function, and nothing else was left behind.
        assert trace_rules.lookup(originals[name]) is not None
    assert not any(
        getattr(key, "__code__", None) is not None
        and EMULATION_DIR in key.__code__.co_filename
        for table in tables
        for key in table
    )


def test_dynamo_constant_folds_emulated_properties_without_a_break():
    def fn(x):
        props = torch.cuda.get_device_properties(x.device)
        return x * props.multi_processor_count + torch.cuda.current_device()

    with EmulatedDevice("sm120"):
        x = torch.empty(4, 4, device="cuda")
        error, log, backend, _ = fullgraph_run(fn, (x,))
    assert error is None and log.messages == []
    assert len(backend.graphs) == 1
    assert "188" in backend.graphs[0].code  # folded in as a constant


# --------------------------------------------------------------------- undo


def _snapshot() -> dict:
    snap = {
        "torch.cuda": {n: getattr(torch.cuda, n) for n in torch_surface.EMULATED_NAMES},
        "torch.version.cuda": torch.version.cuda,
        "torch._C": {n: getattr(torch._C, n, None) for n in torch_surface.C_NAMES},
        "env": {
            k: os.environ.get(k)
            for k in ("PATH", "CUDA_HOME", "FLASHINFER_CUDA_ARCH_LIST", "FLASHINFER_WORKSPACE_BASE")
        },
        "tables": [dict(t) for t in torch_surface.dynamo_tables()],
        "fake_mode": torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE),
        "sinks": list(recorder.STATE.sinks),
        # Patched where it is defined too (a graph names it by that module).
        "torch.cuda.memory.mem_get_info": torch.cuda.memory.mem_get_info,
        "torch.cuda.random": {n: getattr(torch.cuda.random, n) for n in ("get_rng_state", "set_rng_state")},
    }
    if importlib.util.find_spec("cuda.bindings") is not None:
        from cuda.bindings import driver

        snap["driver"] = {n: getattr(driver, n) for n in ("cuInit", "cuDeviceGet", "cuDeviceGetAttribute",
                                                          "cuDeviceGetCount", "cuDeviceGetName", "cuDriverGetVersion")}
    if HAS_FLASHINFER:
        import tvm_ffi

        flashinfer_emulation.import_on_this_machine()
        jit_env = sys.modules["flashinfer.jit.env"]
        jit_core = sys.modules["flashinfer.jit.core"]
        snap["jit_env"] = {
            n: getattr(jit_env, n)
            for n in (
                "FLASHINFER_BASE_DIR",
                "FLASHINFER_CACHE_DIR",
                "FLASHINFER_WORKSPACE_DIR",
                "FLASHINFER_JIT_DIR",
                "FLASHINFER_GEN_SRC_DIR",
            )
        }
        snap["target_archs"] = set(jit_core.current_compilation_context.TARGET_CUDA_ARCHS)
        snap["so_loader"] = tvm_ffi.registry.get_global_func(flashinfer_emulation.SO_LOADER)
    return snap


def _assert_same(before: dict, after: dict) -> None:
    so_before, so_after = before.pop("so_loader", None), after.pop("so_loader", None)
    assert after == before
    if so_before is not None:
        assert so_after.same_as(so_before)


def test_flashinfer_caches_are_found_past_globals_whose_getattr_raises(monkeypatch):
    """A FlashInfer module global whose __getattr__ raises something other than
    AttributeError (flashinfer.comm.cuda_ipc's lazy CUDA runtime library, once
    SGLang imported it) is not a cache, and finding the caches goes on."""
    import functools
    import types

    class Lazy:
        def __getattr__(self, name):
            raise AssertionError("libcudart is not loaded in the current process")

    @functools.cache
    def cached():
        return 1

    module = types.ModuleType("flashinfer.graphbreak_doctor_test_lazy")
    module.cudart, module.cached = Lazy(), cached
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert cached in caches.flashinfer_caches()


@pytest.mark.parametrize("name", ["sm120", "sm90"])
def test_emulated_nvidia_smi_lists_every_gpu_of_the_node(tmp_path, name):
    import subprocess

    preset = resolve_device(name)
    smi = flashinfer_emulation.make_toolkit(tmp_path, preset) / "bin" / "nvidia-smi"
    ask = lambda *argv: subprocess.run([str(smi), *argv], capture_output=True, text=True)  # noqa: E731
    memory = ask("--query-gpu=memory.total", "--format=csv,noheader,nounits").stdout.split()
    assert memory == [str(preset.smi_memory_mib)] * preset.node_gpus
    assert ask("--query-gpu=compute_cap", "--format=csv,noheader").stdout.split() == [
        f"{preset.major}.{preset.minor}"] * preset.node_gpus
    table = ask("--query-gpu=index,name,memory.total", "--format=csv").stdout.splitlines()
    assert table[0] == "index, name, memory.total [MiB]"
    assert table[1:] == [f"{i}, {preset.device_name}, {preset.smi_memory_mib} MiB" for i in range(preset.node_gpus)]
    assert ask("--list-gpus").stdout.count(preset.device_name) == preset.node_gpus
    rows = [line.split() for line in ask("topo", "-m").stdout.splitlines()[1:]]
    links = {cell for row in rows for cell in row[1:] if cell != "X"}
    # An HGX board: NVLink between every pair; a PCIe server: no NVLink.
    assert links == ({"NV18"} if name == "sm90" else {"NODE", "SYS"})
    wrong = ask("--query-gpu=temperature.gpu")
    assert wrong.returncode == 2 and "temperature.gpu" in wrong.stderr


def test_a_wider_node_lists_its_gpus(tmp_path):
    import subprocess

    smi = flashinfer_emulation.make_toolkit(tmp_path, resolve_device("sm100"), gpus=16) / "bin" / "nvidia-smi"
    listed = subprocess.run([str(smi), "-L"], capture_output=True, text=True).stdout.splitlines()
    assert len(listed) == 16 and listed[15].startswith("GPU 15: NVIDIA B200")


# What real cards report (the presets' docstrings say where each figure was
# read): torch's name, SMs, L2 and total memory in MiB, nvidia-smi's total in
# MiB, and how the GPUs of the product's server are linked.
PUBLISHED = {
    "sm90": ("NVIDIA H100 80GB HBM3", (9, 0), 132, 50, 81089, 81559, "NV18"),
    "h200": ("NVIDIA H200", (9, 0), 132, 60, 143156, 143771, "NV18"),
    "sm100": ("NVIDIA B200", (10, 0), 148, 126, 182631, 183359, "NV18"),
    "sm120": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", (12, 0), 188, 128, 97250, 97887, "PCIe"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_each_preset_answers_what_the_real_card_reports(name):
    device_name, capability, sms, l2_mib, total_mib, smi_mib, link = PUBLISHED[name]
    preset = PRESETS[name]
    assert (preset.smi_memory_mib, preset.link, preset.node_gpus) == (smi_mib, link, 8)
    with EmulatedDevice(name):
        props = torch.cuda.get_device_properties(0)
        assert (torch.cuda.get_device_name(), torch.cuda.get_device_capability()) == (device_name, capability)
        assert (props.name, props.multi_processor_count) == (device_name, sms)
        assert props.L2_cache_size == l2_mib * 1024**2
        assert props.total_memory == total_mib * 1024**2
        # Free at start-up: what a framework's snapshot saw on the real card
        # (0.5-0.6 GiB held by the CUDA context).
        free = torch.cuda.mem_get_info()[0]
        assert 0.5 * 1024**3 <= props.total_memory - free <= 0.65 * 1024**3
        assert torch.cuda.can_device_access_peer(0, 7) and not torch.cuda.can_device_access_peer(3, 3)


def test_exit_restores_everything():
    before = _snapshot()
    with EmulatedDevice("sm120") as dev:
        during = _snapshot()
        assert during["fake_mode"] is dev.fake_mode is not None
        assert during["torch.version.cuda"] == "12.9"
        if HAS_FLASHINFER:
            assert during["target_archs"] != before["target_archs"]
    _assert_same(before, _snapshot())


def test_nested_and_repeated_use_restores_everything():
    before = _snapshot()
    dev = EmulatedDevice("sm120")
    with dev:
        with EmulatedDevice("sm100"):
            assert torch.cuda.get_device_capability() == (10, 0)
        assert torch.cuda.get_device_capability() == (12, 0)
        with dev:  # the same instance, entered again while active
            assert dev.fake_mode is not None
        assert dev.fake_mode is not None
        assert torch.empty(2, device="cuda").device.type == "cuda"
    assert dev.fake_mode is None
    with dev:  # and again after exit
        assert torch.cuda.get_device_capability() == (12, 0)
    _assert_same(before, _snapshot())


def test_cpu_device_emulates_nothing():
    before = _snapshot()
    with EmulatedDevice("cpu") as dev:
        assert dev.fake_mode is None
        assert type(torch.empty(2)) is torch.Tensor
        _assert_same(dict(before), _snapshot())
    _assert_same(before, _snapshot())


def test_cuda_device_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="--device cuda"):
        with EmulatedDevice("cuda"):
            pass


# ------------------------------------------------------------------ dry JIT


@pytest.mark.flashinfer_version
@needs_flashinfer
@pytest.mark.parametrize("device", ["sm120", "sm100"])
def test_dry_jit_builds_and_loads_the_arch_specific_module(device):
    import tvm_ffi

    from fixtures.flashinfer_targets import fp4_quantize_wrapper

    seen = []
    with EmulatedDevice(device, on_jit=seen.append) as dev:
        fn, args = fp4_quantize_wrapper()
        x_q, sf = fn(*args)  # eager: FlashInfer's real Python, dry JIT
        assert type(x_q).__name__ == "FakeTensor" and x_q.shape == (128, 128)
        assert x_q.dtype == torch.uint8 and sf.dtype == torch.uint8
    suffix = _sm120_module_suffix() if device == "sm120" else "100"
    expected = f"fp4_quantization_{suffix}"
    assert [(r.name, r.action) for r in dev.jit_requests] == [(expected, "build"), (expected, "load")]
    assert seen == dev.jit_requests  # the callback saw each request as it happened
    assert dev.jit_requests[0].seq < dev.jit_requests[1].seq
    load = dev.jit_requests[1]
    assert "fp4_quantize" in load.exports
    assert not Path(load.path).exists()  # no shared library was written
    # The dry kernel is the same kind of object as a real one.
    kernel = flashinfer_emulation.dry_module(expected, load.exports).fp4_quantize
    assert type(kernel) is tvm_ffi.Function


@pytest.mark.flashinfer
@needs_flashinfer
def test_dry_kernel_leaves_destination_buffers_alone():
    import tvm_ffi

    module = flashinfer_emulation.dry_module("graphbreak_doctor_test", ("write_ones",))
    assert isinstance(module, tvm_ffi.Module)
    out = torch.zeros(8)
    assert module.write_ones(out, 1.0) is None
    assert torch.equal(out, torch.zeros(8))
    with pytest.raises(AttributeError):
        module.not_exported


@pytest.mark.flashinfer_version
@needs_flashinfer
@pytest.mark.parametrize("user_cuda_home", ["/usr/local/cuda", None])
def test_fake_nvcc_answers_flashinfer_version_probe(monkeypatch, user_cuda_home):
    """The emulated toolkit is found as the user's environment finds a
    toolkit: through CUDA_HOME where the user sets it, else by `which nvcc`."""
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if user_cuda_home is None:
        monkeypatch.delenv("CUDA_HOME", raising=False)
    else:
        monkeypatch.setenv("CUDA_HOME", user_cuda_home)
    with EmulatedDevice("sm120") as device:
        from flashinfer.jit import cpp_ext

        cpp_ext.get_cuda_version.cache_clear()
        assert str(cpp_ext.get_cuda_version()) == "12.9"  # parsed from `nvcc --version`
        toolkit = str(device.scratch / "cuda")
        assert cpp_ext.get_cuda_path() == toolkit
        assert os.environ.get("CUDA_HOME") == (None if user_cuda_home is None else toolkit)
        said = device.describe()["cuda_toolkit"]
        assert ("unset here" in said) is (user_cuda_home is None)
    assert os.environ.get("CUDA_HOME") == user_cuda_home


# --------------------------------------------- no emulation frames in findings

TARGETS = ["fp4_quantize_wrapper", "fp4_quantize_op"]


@pytest.mark.flashinfer_version
@needs_flashinfer
@pytest.mark.parametrize("target", TARGETS)
def test_no_break_warning_or_frame_points_into_emulation(target):
    from fixtures import flashinfer_targets

    with EmulatedDevice("sm120"):
        try:
            fn, args = getattr(flashinfer_targets, target)()
        except flashinfer_targets.FlashInferOpMissing:
            pytest.skip("this FlashInfer registers no fp4_quantize op")
        log, _, explain_warnings = explain_run(fn, args)
        error, full_log, _, full_warnings = fullgraph_run(fn, args)
    texts = log.messages + full_log.messages
    texts += [f"{w.filename}:{w.lineno}: {w.message}" for w in explain_warnings + full_warnings]
    if error is not None:
        import traceback

        texts.append("".join(traceback.format_exception(error)))
    assert texts == [] or all(EMULATION_DIR not in t for t in texts)
    assert all("graphbreak_doctor.emulation" not in t for t in texts)


# ------------------------------------- FlashInfer FP4 quantization on SM120


@pytest.mark.flashinfer_version
@needs_flashinfer
def test_flashinfer_063_story_on_sm120():
    from fixtures.flashinfer_targets import fp4_quantize_wrapper

    if _has_fp4_op():
        pytest.skip("FlashInfer registers torch.ops.flashinfer.fp4_quantize (0.7+)")
    with EmulatedDevice("sm120"):
        fn, args = fp4_quantize_wrapper()
        log, _, _ = explain_run(fn, args)
        error, _, _, _ = fullgraph_run(fn, args)
    stacks = log.with_stack()

    def one(predicate):
        hits = [s for s in stacks if predicate(s)]
        assert hits, "\n\n".join(stacks)
        return hits[0]

    # subprocess, reached from FlashInfer's CUDA version probe.
    one(lambda s: "subprocess.py" in s and "flashinfer/jit/cpp_ext.py" in s
        and "_thread.allocate_lock" in s)
    # filesystem: Path.exists -> os.stat inside FlashInfer's JIT loading.
    one(lambda s: "pathlib.py" in s and "posix.stat" in s and "flashinfer/jit/core.py" in s)
    # unsupported builtin: SimpleNamespace(...) building the module table.
    one(lambda s: "SimpleNamespace" in s and "fp4_quantization.py" in s)
    # opaque call: the tvm-ffi Function (kernel lookup / kernel) called from a traced frame.
    one(lambda s: "Function" in s and "tvm_ffi" in s)
    sites = {s.splitlines()[0] for s in stacks}
    assert len(sites) >= 4
    # fullgraph stops at the first: the subprocess break from cpp_ext.py.
    assert error is not None
    text = str(error)
    assert "_thread.allocate_lock" in text
    assert "flashinfer/jit/cpp_ext.py" in text and "get_cuda_version" in text


@pytest.mark.flashinfer
@needs_flashinfer
def test_without_cuda_home_the_story_stops_where_flashinfer_looks_for_nvcc(monkeypatch):
    """A server whose environment names no toolkit: FlashInfer's get_cuda_path
    runs `which nvcc`, and that subprocess is where fullgraph stops first."""
    from fixtures.flashinfer_targets import fp4_quantize_wrapper

    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with EmulatedDevice("sm120"):
        fn, args = fp4_quantize_wrapper()
        error, _, _, _ = fullgraph_run(fn, args)
    assert error is not None
    text = str(error)
    assert "flashinfer/jit/cpp_ext.py" in text and "get_cuda_path" in text, text


@pytest.mark.flashinfer_version
@needs_flashinfer
def test_flashinfer_074_registered_op_has_no_quantization_break():
    from fixtures.flashinfer_targets import fp4_quantize_op, fp4_quantize_wrapper

    if not _has_fp4_op():
        pytest.skip("FlashInfer has no torch.ops.flashinfer.fp4_quantize (before 0.7)")
    with EmulatedDevice("sm120"):
        fn, args = fp4_quantize_op()
        error, log, backend, _ = fullgraph_run(fn, args)
        wrapper, wrapper_args = fp4_quantize_wrapper()
        wrapper_log, _, _ = explain_run(wrapper, wrapper_args)
    assert error is None and log.messages == []
    assert len(backend.graphs) == 1
    assert "torch.ops.flashinfer.fp4_quantize" in backend.graphs[0].code
    # The Python wrapper still breaks: JIT loading, subprocess, opaque kernel.
    assert wrapper_log.with_stack()
    assert any("flashinfer/" in s for s in wrapper_log.with_stack())


@pytest.mark.flashinfer_version
@needs_flashinfer
def test_fp4_quantize_op_factory_explains_a_missing_op():
    from fixtures import flashinfer_targets

    if _has_fp4_op():
        pytest.skip("the op exists in this FlashInfer")
    with EmulatedDevice("sm120"):
        with pytest.raises(flashinfer_targets.FlashInferOpMissing, match="0.7"):
            flashinfer_targets.fp4_quantize_op()


# ------------------------------------------- device queries, as a user runs them


def test_a_target_that_asks_the_gpu_about_itself_gets_the_presets_answers(tmp_path):
    """`trace` on targets that ask is_available, device_count,
    get_device_name, get_device_capability and mem_get_info outside any
    framework: Dynamo folds what it folds on the GPU (fullgraph OK) and
    breaks where it breaks on the GPU; never exit 2 ("the target raises")."""
    from graphbreak_doctor.model import Findings
    from tests.conftest import run_cli

    names = ("by_capability", "by_count", "by_name", "by_free_memory")
    argv = [a for name in names for a in ("--target", f"fixtures.device_queries:{name}")]
    done = run_cli("trace", *argv, "--device", "sm100", "--no-html", "--json", str(tmp_path / "q.json"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "wrote to stdout/stderr" not in done.stdout + done.stderr
    found = {}
    for name in names:
        (path,) = tmp_path.glob(f"q-fixtures.device_queries.{name}-sm100-*.json")
        found[name] = Findings.from_json(path.read_text())
    for folded in ("by_capability", "by_free_memory"):
        assert found[folded].fullgraph.ok and not found[folded].breaks, folded
    for refused, query in (("by_count", "device_count"), ("by_name", "get_device_name")):
        findings = found[refused]
        first = findings.break_by_id(findings.fullgraph.break_id)
        assert not findings.fullgraph.ok and first.gb_type == "torch.* op returned non-Tensor", refused
        assert query in first.reason and first.category == "opaque-call"
        # A str or an int cannot come out of an opaque op: ask once, before capture.
        assert first.fix.recipe == "hoist-call" and query in first.fix.summary, first.fix
        assert all(b.actionable_frame.file.endswith("fixtures/device_queries.py") for b in findings.breaks)


def test_op_schemas_are_read_from_a_librarys_data_not_its_gpu_code(tmp_path):
    """A library built by the machine's compiler: the schema strings in its
    read-only data are read (in order); one in a section of GPU code
    (``.nv_fatbin``, most of a CUDA library's bytes) and one in a section the
    loader does not map are not -- the reader looks only where a host
    program keeps its strings."""
    import shutil
    import subprocess

    from graphbreak_doctor.emulation.standins import schemas

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler on PATH")
    source = tmp_path / "ops.c"
    source.write_text(
        'const char *first = "first_op(Tensor a) -> Tensor";\n'
        'const char *second = "second_op(Tensor(a!) out, int n) -> ()";\n'
        '__attribute__((section(".nv_fatbin"), used)) const char gpu[] = "gpu_code_op(Tensor a) -> Tensor";\n'
        '__asm__(".section .unmapped_strings,\\"\\",@progbits\\n.asciz \\"unmapped_op(int a) -> int\\"\\n.previous");\n'
        'const char **names(void) { static const char *all[] = {0, 0}; all[0] = first; all[1] = second; return all; }\n')
    library = tmp_path / "libops.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O0", "-o", str(library), str(source)], check=True,
                   capture_output=True)
    import mmap

    with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        ranges = schemas.data_ranges(data)
        whole = bytes(data)
    assert ranges and ranges != [(0, len(whole))]
    gpu, unmapped = whole.index(b"gpu_code_op("), whole.index(b"unmapped_op(")
    assert not any(first <= at < last for first, last in ranges for at in (gpu, unmapped)), ranges
    assert schemas.schemas_in(library) == ("first_op(Tensor a) -> Tensor", "second_op(Tensor(a!) out, int n) -> ()")
    # Not an ELF file (or one whose section table is cut off): the whole of it.
    cut = tmp_path / "cut.so"
    cut.write_bytes(whole[:64] + b"\x00later(int a) -> ()\x00")
    assert schemas.schemas_in(cut) == ("later(int a) -> ()",)

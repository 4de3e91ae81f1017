"""The part of `torch.cuda` that FlashInfer's Python code reads, answered for a preset.

Why replace public functions and then register the replacements with Dynamo:
Dynamo decides how to treat a `torch.cuda.*` call by the identity of the
function object, in tables built from qualified names the first time they are
needed (`torch/_dynamo/trace_rules.py: get_torch_obj_rule_map`, and in
`torch/_dynamo/variables/torch.py`: `constant_fold_functions`,
`constant_fold_functions_need_guards`, `TorchInGraphFunctionVariable._get_handlers`).
A replacement missing from those tables would be traced as user code -- into
this package -- so each replacement is entered in every table its original is
in, with the same value, and removed again on exit. The replacements are then
handled exactly like the originals: constant-folded at trace time
(`get_device_properties`, guarded `current_device`), special-cased
(`current_stream`), or classified as an in-graph torch function.

`torch.cuda.is_available()` answers True, as on the GPU: Dynamo folds it in
traced code, and around every frame it compiles it saves and restores the
CUDA RNG state (`torch._dynamo.convert_frame.preserve_global_state`), which
`get_rng_state` / `set_rng_state` answer from the emulated device's
generators (cuda_runtime.py: a Philox seed and offset per GPU). Fake tensor
mode reads the same probe to decide whether it may put a constant on a real
device (`FakeTensorMode.avoid_device_init`); it keeps this machine's answer,
as nothing can be put on a device here.

Not emulated, on purpose:
- `torch.cuda.synchronize`: its Dynamo handler looks the function up in a local
  table that cannot be extended (cuda_runtime.py swaps its code instead).

Emulated the way a CUDA build of torch has them (see `install_device_switch`
and mem_pool.py):
- `torch.cuda._exchange_device` / `_maybe_exchange_device` (used by
  `with torch.cuda.device(i)`, e.g. flashinfer/utils.py `_get_stream_cache_buf`).
  On a CPU build these are Python stubs that raise, and Dynamo's
  `CUDADeviceVariable` (torch/_dynamo/variables/ctx_manager.py) calls its
  captured copy at trace time, which fails inside Dynamo. On a CUDA build they
  are the C bindings `torch._C._cuda_exchangeDevice` / `_cuda_maybeExchangeDevice`,
  in-graph functions (trace_rules.torch_c_binding_in_graph_functions) with a
  handler in `TorchInGraphFunctionVariable._get_handlers`. The emulation installs
  replacements under the C names, gives them the C bindings' rule and the
  handler, and points `CUDADeviceVariable` at them: Dynamo then handles
  `with torch.cuda.device(i)` as on a GPU, in the graph, never tracing this file.
- `torch.cuda.MemPool` / `use_mem_pool` (mem_pool.py).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Optional

import torch

from graphbreak_doctor.emulation.preset import KIB, DevicePreset
from . import cuda_graph, cuda_runtime, device_guard, dlpack_stream, mem_pool
from graphbreak_doctor.patching import UndoLog


def device_properties(preset: DevicePreset) -> Any:
    """An instance of `torch.cuda._CudaDeviceProperties` describing `preset`.

    The exact type matters: Dynamo wraps a constant-folded
    `get_device_properties()` result as a constant only if its type is in
    `torch/_dynamo/utils.py: common_constant_types`, which lists
    `torch.cuda._CudaDeviceProperties`; any other type breaks the graph in
    FlashInfer's `get_compute_capability` (flashinfer/utils.py). On a CPU build
    that type is a placeholder from `torch/_utils.py: _dummy_type` whose
    constructor refuses to run, so the instance is made without calling it and
    given the attributes the real pybind type exposes.
    """
    cls = torch.cuda._CudaDeviceProperties
    try:
        props = object.__new__(cls)
    except TypeError:  # a CUDA build's real pybind type cannot be made this way
        props = _PlainProperties()
    values = {
        "name": preset.device_name,
        "major": preset.major,
        "minor": preset.minor,
        "total_memory": preset.total_memory,
        "multi_processor_count": preset.sms,
        "is_integrated": 0,
        "is_multi_gpu_board": 0,
        "max_threads_per_multi_processor": preset.threads_per_sm,
        "max_threads_per_block": 1024,
        "warp_size": 32,
        "regs_per_multiprocessor": 65536,
        "shared_memory_per_block": 48 * KIB,
        "shared_memory_per_block_optin": preset.smem_optin_kib * KIB,
        "shared_memory_per_multiprocessor": preset.smem_per_sm_kib * KIB,
        "L2_cache_size": preset.l2_mib * 1024 * KIB,
        "gcnArchName": "",
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    }
    for key, value in values.items():
        setattr(props, key, value)
    return props


class _PlainProperties:
    """Fallback holder with the same attribute names (CUDA builds of torch)."""


# The GPUs of the emulated node (EmulatedDevice sets it while it is active):
# what device_count() answers, and the indices the queries accept.
DEVICE_COUNT = 1


def _index(device: Any) -> int:
    """Device index as torch.cuda._get_device_index resolves it (None -> current)."""
    if device is None:
        return 0
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return 0 if device.index is None else device.index
    return int(device)


def _checked(device: Any) -> int:
    idx = _index(device)
    if idx < 0 or idx >= DEVICE_COUNT:
        raise AssertionError("Invalid device id")
    return idx


def _noting(name: str, fn: Callable[..., Any], note: Callable[[str], None]) -> Callable[..., Any]:
    """``fn``, which first notes that the emulated ``name`` was called."""

    def call(*args: Any, **kwargs: Any) -> Any:
        note(name)
        return fn(*args, **kwargs)

    return call


def _ignore(_name: str) -> None:
    return None


def _nothing_allocated(_index: int) -> int:
    return 0


def build_surface(preset: DevicePreset, note: Callable[[str], None] = _ignore,
                  allocated: Callable[[int], int] = _nothing_allocated) -> dict[str, Callable[..., Any]]:
    """Replacements for `torch.cuda.<name>`, closed over one preset; each
    calls ``note("torch.cuda.<name>")`` when it runs. ``allocated(index)`` is
    the device memory in use on GPU ``index`` (what ``mem_get_info`` does not
    count as free)."""
    props = device_properties(preset)
    total = props.total_memory
    context = preset.context_mib * 1024 * 1024

    def get_device_properties(device=None):
        _checked(device)
        return props

    def get_device_capability(device=None):
        _checked(device)
        return (props.major, props.minor)

    def get_device_name(device=None):
        _checked(device)
        return props.name

    def is_available():
        return True

    # A CUDA build of torch (what serving frameworks check before they ask
    # NVML or the driver how many GPUs there are).
    def _is_compiled():
        return True

    def device_count():
        return DEVICE_COUNT

    def _device_count_nvml():
        return DEVICE_COUNT

    def get_rng_state(device="cuda"):
        return cuda_runtime.generator(_checked(device)).get_state()

    def set_rng_state(new_state, device="cuda"):
        cuda_runtime.generator(_checked(device)).set_state(new_state)

    def current_device():
        return 0

    # Every pair of the node's GPUs reaches each other directly: over NVLink
    # on an HGX board, over PCIe peer-to-peer on a PCIe server (the preset's
    # ``link`` says which; nvidia-smi topo -m shows it).
    def can_device_access_peer(device, peer_device):
        return _checked(device) != _checked(peer_device)

    def current_stream(device=None):
        return cuda_runtime.current_stream(_checked(device))

    def default_stream(device=None):
        return cuda_runtime.cuda_stream(0, _checked(device))

    def is_current_stream_capturing():
        return cuda_graph.capturing()

    def mem_get_info(device=None):
        return (max(total - context - allocated(_checked(device)), 0), total)

    surface = {
        "get_device_properties": get_device_properties,
        "get_device_capability": get_device_capability,
        "get_device_name": get_device_name,
        "is_available": is_available,
        "_is_compiled": _is_compiled,
        "device_count": device_count,
        "_device_count_nvml": _device_count_nvml,
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "current_device": current_device,
        "can_device_access_peer": can_device_access_peer,
        "current_stream": current_stream,
        "default_stream": default_stream,
        "is_current_stream_capturing": is_current_stream_capturing,
        "mem_get_info": mem_get_info,
    }
    surface = {name: _noting(f"torch.cuda.{name}", fn, note) for name, fn in surface.items()}
    for name, fn in surface.items():
        original = getattr(torch.cuda, name)
        fn.__name__ = original.__name__
        fn.__qualname__ = original.__qualname__
        fn.__module__ = original.__module__
        fn.__doc__ = original.__doc__
    return surface


# The names are the ones FlashInfer reads on its quantization, GEMM and MoE
# paths (flashinfer/utils.py get_compute_capability, device_support_pdl,
# get_device_sm_count; compilation_context.py; fused_moe/*).
EMULATED_NAMES = tuple(build_surface(DevicePreset(name="x", emulated=True)))


def dynamo_tables() -> list[dict]:
    """Every Dynamo table keyed by a torch.cuda function object.

    Building the rule map here also pins it to the real functions: it is a
    functools.cache over names, and built while a replacement is installed it
    would map the name to the replacement for the rest of the process.
    """
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import torch as dyn_torch

    return [
        trace_rules.get_torch_obj_rule_map(),
        dyn_torch.constant_fold_functions,
        dyn_torch.constant_fold_functions_need_guards,
        dyn_torch.TorchInGraphFunctionVariable._get_handlers(),
    ]


def install(preset: DevicePreset, log: UndoLog, note: Callable[[str], None] = _ignore,
            device_count: int = 1,
            allocated: Callable[[int], int] = _nothing_allocated) -> dict[str, Callable[..., Any]]:
    """Install the surface for `preset` on a node of `device_count` such GPUs
    whose memory in use is ``allocated(index)``; every change is recorded in
    `log`, every call of an emulated function noted with ``note``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    tables = dynamo_tables()
    log.setattr(sys.modules[__name__], "DEVICE_COUNT", device_count)
    # Read before is_available answers True: nothing can be put on a device here.
    avoid = FakeTensorMode.__dict__["avoid_device_init"].fget(None)
    log.setattr(FakeTensorMode, "avoid_device_init", property(lambda self: avoid))
    log.call_on_undo(_rule_map_rebuilt_check(tables[0]))
    surface = build_surface(preset, note, allocated)
    _constant_properties(surface["get_device_properties"](0), log)
    for name, replacement in surface.items():
        original = getattr(torch.cuda, name)
        for table in tables:
            if original in table:
                log.setitem(table, replacement, table[original])
        log.setattr(torch.cuda, name, replacement)
        # Where the function is defined too (torch.cuda.memory.mem_get_info):
        # a graph that calls it names it by its module there.
        home = sys.modules.get(original.__module__)
        if home is not None and home is not torch.cuda and getattr(home, name, None) is original:
            log.setattr(home, name, replacement)
    # FlashInfer compares torch.version.cuda with "12.8" / "12.9" to pick kernel
    # variants (flashinfer/quantization/fp4_quantization.py
    # get_fp4_quantization_module: "120" -> "120f" when CUDA >= 12.9).
    # Imported first with this machine's torch.version.cuda: with a CUDA
    # named and no Triton installed, its import logs that flop counting will
    # miss Triton kernels -- a line a GPU server (Triton installed) never
    # prints, which Dynamo's compile (AOTAutograd) would import it to print.
    importlib.import_module("torch.utils.flop_counter")

    log.setattr(torch.version, "cuda", preset.cuda)
    install_c_surface(log, note)
    device_guard.install(log)
    dlpack_stream.install(log)
    install_device_switch(log)
    mem_pool.install(log)
    return surface


def _constant_properties(props: Any, log: UndoLog) -> None:
    """On a CUDA build of torch the emulated device's properties are a
    ``_PlainProperties`` (``device_properties``): Dynamo folds a
    ``get_device_properties()`` call into a constant only if the result's
    type is one of its constant types, where ``_CudaDeviceProperties`` is;
    the stand-in type joins them while the device is emulated."""
    from torch._dynamo import utils

    kind = type(props)
    if kind is not _PlainProperties or kind in utils.common_constant_types:
        return
    utils.common_constant_types.add(kind)
    log.call_on_undo(lambda: utils.common_constant_types.discard(kind))


def _rule_map_rebuilt_check(rules: dict) -> Callable[[], None]:
    """Runs last on undo, when the real functions are back. Something the
    target ran may have cleared Dynamo's trace-rule caches while emulated
    (`torch.distributed.init_process_group` does: trace_rules.clear_lru_cache);
    a map rebuilt then holds the replacements. Dropped, it is built again
    from the real functions when next needed."""
    from torch._dynamo import trace_rules

    def check() -> None:
        if trace_rules.get_torch_obj_rule_map() is not rules:
            trace_rules.get_torch_obj_rule_map.cache_clear()

    return check


# C functions a CPU build of torch lacks (and a CUDA build's ask the driver) but FlashInfer calls directly:
# flashinfer/utils.py _get_cache_buf keys scratch buffers by
# torch._C._cuda_getCurrentRawStream(index). Dynamo's rule for them comes from
# their qualified names in trace_rules.torch_c_binding_in_graph_functions; the
# replacement gets exactly that rule.
C_NAMES = ("_cuda_getCurrentRawStream", "_cuda_setStream", "_cuda_getCurrentBlasHandle",
           "_cuda_exchangeDevice", "_cuda_maybeExchangeDevice", "_cuda_getDeviceCount", "_cuda_getArchFlags")


_BLAS_HANDLE = 0x7E570000
ARCH_FLAGS = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120"


def _c_surface(note: Callable[[str], None]) -> dict[str, Callable[..., Any]]:
    def _cuda_getCurrentRawStream(device_index):  # the null (default) stream
        _checked(device_index)
        return 0

    # The cuBLAS handle torch keeps per device and stream, as an address
    # (torch.cuda.current_blas_handle; FlashInfer 0.6's FP8 GEMM hands it to
    # its kernels, which run dry here). A made-up, non-null address.
    def _cuda_getCurrentBlasHandle():
        return _BLAS_HANDLE

    # torch/csrc/cuda/Module.cpp THCPModule_cudaExchangeDevice: a negative index
    # is a no-op returning -1; otherwise the previous device (always 0 here).
    def _cuda_exchangeDevice(device):
        if int(device) < 0:
            return -1
        _checked(int(device))
        return 0

    def _cuda_maybeExchangeDevice(device):
        if int(device) < 0:
            return -1
        _checked(int(device))
        return 0

    def _cuda_setStream(stream_id=0, device_index=0, device_type=1):
        _checked(int(device_index))
        cuda_runtime.set_current_stream(stream_id)

    functions = {
        # The driver's GPU count, and the architectures a CUDA 12.9 build of
        # torch carries kernels for (torch.cuda.get_arch_list()).
        "_cuda_getDeviceCount": lambda: DEVICE_COUNT,
        "_cuda_getArchFlags": lambda: ARCH_FLAGS,
        "_cuda_getCurrentRawStream": _cuda_getCurrentRawStream,
        "_cuda_setStream": _cuda_setStream,
        "_cuda_getCurrentBlasHandle": _cuda_getCurrentBlasHandle,
        "_cuda_exchangeDevice": _cuda_exchangeDevice,
        "_cuda_maybeExchangeDevice": _cuda_maybeExchangeDevice,
        # torch.accelerator's bindings: the accelerator is CUDA (as on a CUDA
        # build), the emulated GPU is device 0, its allocator never
        # initialized (nothing to empty), a device wait returns.
        "_accelerator_getAccelerator": lambda: torch.device("cuda"),
        "_get_accelerator": lambda check=False: torch.device("cuda"),
        "_accelerator_getDeviceIndex": lambda: 0,
        "_accelerator_getStream": lambda device_index=0: cuda_runtime.current_stream(_checked(int(device_index))),
        "_accelerator_setDeviceIndex": lambda device: None if _checked(int(device)) is not None else None,
        "_accelerator_exchangeDevice": _cuda_exchangeDevice,
        "_accelerator_maybeExchangeDevice": _cuda_maybeExchangeDevice,
        "_accelerator_isAllocatorInitialized": lambda: False,
        "_accelerator_synchronizeDevice": lambda device: None,
    }
    return {name: _noting(f"torch._C.{name}", fn, note) for name, fn in functions.items()}


# torch.cuda.<python name> -> torch._C.<binding> on a CUDA build.
DEVICE_SWITCH = {
    "_exchange_device": "_cuda_exchangeDevice",
    "_maybe_exchange_device": "_cuda_maybeExchangeDevice",
}


def install_device_switch(log: UndoLog) -> None:
    """`torch.cuda._exchange_device` and friends as a CUDA build has them."""
    from torch._dynamo.variables import torch as dyn_torch
    from torch._dynamo.variables.ctx_manager import CUDADeviceVariable

    handlers = dyn_torch.TorchInGraphFunctionVariable._get_handlers()
    for py_name, c_name in DEVICE_SWITCH.items():
        original = getattr(torch.cuda, py_name)
        binding = getattr(torch._C, c_name)
        if original is binding:  # a CUDA build: nothing to do
            continue
        # The handler Dynamo registered for torch.cuda.<py_name> (keyed by the
        # object torch.cuda.<py_name> was when the table was built).
        if original in handlers:
            log.setitem(handlers, binding, handlers[original])
        log.setattr(torch.cuda, py_name, binding)
    log.setattr(CUDADeviceVariable, "_exchange_fn", staticmethod(torch.cuda._exchange_device))
    log.setattr(
        CUDADeviceVariable, "_maybe_exchange_fn", staticmethod(torch.cuda._maybe_exchange_device)
    )


def install_c_surface(log: UndoLog, note: Callable[[str], None] = _ignore) -> None:
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import torch as dyn_torch

    rule_map = trace_rules.get_torch_obj_rule_map()
    handlers = dyn_torch.TorchInGraphFunctionVariable._get_handlers()
    for name, replacement in _c_surface(note).items():
        # A CUDA build has the real binding, which asks the driver (and fails
        # with none): replaced while emulated too, with the binding's rule
        # and Dynamo handler.
        real = getattr(torch._C, name, None)
        rule = trace_rules.torch_c_binding_in_graph_functions.get(f"torch._C.{name}")
        if rule is not None:
            log.setitem(rule_map, replacement, rule)
        if real is not None and real in handlers:
            log.setitem(handlers, replacement, handlers[real])
        replacement.__module__ = "torch._C"
        replacement.__name__ = replacement.__qualname__ = name
        log.setattr(torch._C, name, replacement)


def originals() -> dict[str, Optional[Callable[..., Any]]]:
    return {name: getattr(torch.cuda, name, None) for name in EMULATED_NAMES}

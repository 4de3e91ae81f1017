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

Not emulated, on purpose:
- `torch.cuda.is_available()`: Dynamo would then save and restore the CUDA RNG
  state around every frame and fail on a CPU build.
- `torch.cuda.synchronize`: its Dynamo handler looks the function up in a local
  table that cannot be extended.
- `torch.cuda._exchange_device` (used by `with torch.cuda.device(i)`): Dynamo
  classifies it as skipped, so a replacement's break would name this file.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from .presets import GIB, KIB, DevicePreset
from . import device_guard
from .undo import UndoLog


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
        "total_memory": preset.memory_gb * GIB,
        "multi_processor_count": preset.sms,
        "is_integrated": 0,
        "is_multi_gpu_board": 0,
        "max_threads_per_multi_processor": 1536 if preset.major >= 12 else 2048,
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


_DEVICE_COUNT = 1


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
    if idx < 0 or idx >= _DEVICE_COUNT:
        raise AssertionError("Invalid device id")
    return idx


def build_surface(preset: DevicePreset) -> dict[str, Callable[..., Any]]:
    """Replacements for `torch.cuda.<name>`, closed over one preset."""
    props = device_properties(preset)
    total = props.total_memory

    def get_device_properties(device=None):
        _checked(device)
        return props

    def get_device_capability(device=None):
        _checked(device)
        return (props.major, props.minor)

    def get_device_name(device=None):
        _checked(device)
        return props.name

    def device_count():
        return _DEVICE_COUNT

    def current_device():
        return 0

    def current_stream(device=None):
        return torch.Stream(stream_id=0, device_index=_checked(device), device_type=1)

    def default_stream(device=None):
        return torch.Stream(stream_id=0, device_index=_checked(device), device_type=1)

    def is_current_stream_capturing():
        return False

    def mem_get_info(device=None):
        _checked(device)
        return (total, total)

    surface = {
        "get_device_properties": get_device_properties,
        "get_device_capability": get_device_capability,
        "get_device_name": get_device_name,
        "device_count": device_count,
        "current_device": current_device,
        "current_stream": current_stream,
        "default_stream": default_stream,
        "is_current_stream_capturing": is_current_stream_capturing,
        "mem_get_info": mem_get_info,
    }
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


def install(preset: DevicePreset, log: UndoLog) -> dict[str, Callable[..., Any]]:
    """Install the surface for `preset`; every change is recorded in `log`."""
    tables = dynamo_tables()
    surface = build_surface(preset)
    for name, replacement in surface.items():
        original = getattr(torch.cuda, name)
        for table in tables:
            if original in table:
                log.setitem(table, replacement, table[original])
        log.setattr(torch.cuda, name, replacement)
    # FlashInfer compares torch.version.cuda with "12.8" / "12.9" to pick kernel
    # variants (flashinfer/quantization/fp4_quantization.py
    # get_fp4_quantization_module: "120" -> "120f" when CUDA >= 12.9).
    log.setattr(torch.version, "cuda", preset.cuda)
    install_c_surface(log)
    device_guard.install(log)
    return surface


# C functions a CPU build of torch lacks but FlashInfer calls directly:
# flashinfer/utils.py _get_cache_buf keys scratch buffers by
# torch._C._cuda_getCurrentRawStream(index). Dynamo's rule for them comes from
# their qualified names in trace_rules.torch_c_binding_in_graph_functions; the
# replacement gets exactly that rule.
C_NAMES = ("_cuda_getCurrentRawStream",)


def _c_surface() -> dict[str, Callable[..., Any]]:
    def _cuda_getCurrentRawStream(device_index):  # the null (default) stream
        _checked(device_index)
        return 0

    return {"_cuda_getCurrentRawStream": _cuda_getCurrentRawStream}


def install_c_surface(log: UndoLog) -> None:
    from torch._dynamo import trace_rules

    rule_map = trace_rules.get_torch_obj_rule_map()
    for name, replacement in _c_surface().items():
        if hasattr(torch._C, name):  # a CUDA build: the real one answers
            continue
        rule = trace_rules.torch_c_binding_in_graph_functions.get(f"torch._C.{name}")
        if rule is not None:
            log.setitem(rule_map, replacement, rule)
        replacement.__module__ = "torch._C"
        log.setattr(torch._C, name, replacement)


def originals() -> dict[str, Optional[Callable[..., Any]]]:
    return {name: getattr(torch.cuda, name, None) for name in EMULATED_NAMES}

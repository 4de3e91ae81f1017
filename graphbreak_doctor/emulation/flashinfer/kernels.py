"""Dry tvm-ffi modules: what a loaded FlashInfer library offers while emulated.

A dry module is a genuine `tvm_ffi.Module` (tvm-ffi's system library,
`tvm_ffi.system_lib`) whose functions are genuine `tvm_ffi.Function` objects
over one C-level no-op (a ctypes callback with tvm-ffi's safe-call ABI,
registered with `TVMFFIEnvModRegisterSystemLibSymbol`), the same type as
real kernels, so Dynamo sees the same opaque call. Destination-passing
kernels therefore leave their (fake) outputs as they are. An export may
instead answer with a Python callable (answers.py) or with host code built
for this machine (host_code.py).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from typing import Any, Callable, Optional

_SYMBOL_PREFIX = "graphbreak_doctor_dry_"

_SAFE_CALL = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p
)


def _no_op_kernel(handle, args, num_args, result):  # noqa: ARG001
    # tvm-ffi safe-call ABI: 0 = success; the result slot keeps its None.
    return 0


NO_OP_KERNEL = _SAFE_CALL(_no_op_kernel)  # kept alive for the life of the process


@dataclasses.dataclass
class KernelState:
    """What dry modules keep for the life of the process: symbols in tvm-ffi's
    system library cannot be unregistered, so each symbol, and the function
    behind an answering one, is made once and reused."""

    registered_symbols: set[str] = dataclasses.field(default_factory=set)
    answer_functions: dict[str, Any] = dataclasses.field(default_factory=dict)  # symbol -> (tvm_ffi.Function, ctypes callback)
    converted: dict[Any, Any] = dataclasses.field(default_factory=dict)  # answer callable -> tvm_ffi.Function


STATE = KernelState()


@functools.cache
def tvm_ffi_c_api() -> ctypes.CDLL:
    import tvm_ffi

    lib = ctypes.CDLL(tvm_ffi.libinfo.find_libtvm_ffi(), mode=ctypes.RTLD_GLOBAL)
    lib.TVMFFIEnvModRegisterSystemLibSymbol.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.TVMFFIEnvModRegisterSystemLibSymbol.restype = ctypes.c_int
    lib.TVMFFIFunctionCall.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]
    lib.TVMFFIFunctionCall.restype = ctypes.c_int
    return lib


def as_function(answer: Callable[..., Any]) -> Any:
    """`answer` as a tvm_ffi.Function, converted once per process."""
    function = STATE.converted.get(answer)
    if function is None:
        import tvm_ffi

        function = STATE.converted[answer] = tvm_ffi.convert(answer)
    return function


def _answer_symbol(symbol: str, answer: Callable[..., Any]) -> Any:
    """A C symbol with tvm-ffi's safe-call ABI that forwards to `answer`.

    `answer` becomes a genuine tvm_ffi.Function (tvm_ffi.convert); the C entry
    point hands the packed arguments and the result slot to it through
    `TVMFFIFunctionCall`, so tvm-ffi itself converts arguments and the result
    (objects included) with the usual ownership rules.
    """
    lib = tvm_ffi_c_api()
    function = as_function(answer)
    handle = ctypes.c_void_p(function.__chandle__())

    def forward(_handle, args, num_args, result):
        return lib.TVMFFIFunctionCall(handle, args, num_args, result)

    callback = _SAFE_CALL(forward)
    STATE.answer_functions[symbol] = (function, callback)
    return callback


def module(name: str, exports: tuple[str, ...], answers: dict[str, Optional[Callable[..., Any]]]):
    """A tvm_ffi Module named after `name` whose `exports` are no-op kernels,
    except those `answers` gives a callable for.

    Symbols in tvm-ffi's system library cannot be unregistered, so each
    (module, kernel) symbol is registered once per process and reused.
    """
    import tvm_ffi

    prefix = f"{_SYMBOL_PREFIX}{name}__"
    lib = tvm_ffi_c_api()
    for export in exports:
        symbol = f"__tvm_ffi_{prefix}{export}"
        if symbol not in STATE.registered_symbols:
            answer = answers.get(export)
            entry = NO_OP_KERNEL if answer is None else _answer_symbol(symbol, answer)
            rc = lib.TVMFFIEnvModRegisterSystemLibSymbol(
                symbol.encode(), ctypes.cast(entry, ctypes.c_void_p)
            )
            if rc != 0:
                raise RuntimeError(f"tvm-ffi refused the dry kernel symbol {symbol}")
            STATE.registered_symbols.add(symbol)
    return tvm_ffi.system_lib(prefix)

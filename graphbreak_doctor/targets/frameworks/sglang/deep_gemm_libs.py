"""DeepGEMM's kernel libraries, which need a CUDA build of torch.

- The older DeepGEMM (bundled with sgl-kernel 0.3, which SGLang 0.5.9 uses):
  ``deep_gemm_cpp``, a torch extension that registers ``torch.ops.deep_gemm``,
  and the package binds every op by name when it is imported. The stand-in
  is an empty module of that name plus every schema the binary declares,
  read from its bytes, with no kernel.
- DeepGEMM 0.2.3 (SGLang 0.5.23's ``sgl-deep-gemm``): ``deep_gemm/_C.so``
  is again a torch op library, which the package loads by path with
  ``torch.ops.load_library`` at import and binds lazily by name. The
  stand-in declares every schema the binary declares, as for the older
  one, and that one load does nothing.
- DeepGEMM's kernel library as a tvm-ffi module (``deep_gemm/_C.so``, the
  releases between): the package loads it at import, and some SGLang
  releases import the package at module level (0.5.21's DSA backend). The package is imported with
  tvm-ffi's ``load_module`` answering for that one file with
  ``UnloadedLibrary``: every function the package binds is found, and each
  raises ``StandInCalled`` when called.

In both, ``init`` does nothing, ``get_num_sms`` answers the device's SM
count (DeepGEMM's default, as the emulated device answers it), and the
kernels the DSA indexer calls that return a tensor (``DEEP_GEMM_DRY``: the
paged-MQA scheduler's output, which the decode metadata computes before any
forward, and the MQA logits) answer an empty tensor of the kernel's output
shape, values not computed, as a dry launch on fake tensors gives."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

from graphbreak_doctor.emulation.standins.binaries import (
    StandIns, UnloadedLibrary, declared, empty_module, loads, no_load_of, no_op, op_library, package_dir,
    sm_count,
)
from graphbreak_doctor.emulation.standins.schemas import schemas_in
from graphbreak_doctor.patching import UndoLog


def install_deep_gemm(log: UndoLog, out: StandIns) -> None:
    home = package_dir("deep_gemm")
    if home is None:
        return
    ops_library = sorted(home.glob("deep_gemm_cpp*.so"))
    if ops_library:  # the older DeepGEMM: a torch op library
        _deep_gemm_ops(log, out, ops_library[0])
        return
    binary = home / "_C.so"
    if binary.exists() and _op_library(binary):  # DeepGEMM 0.2.3: a torch op library loaded by path
        _deep_gemm_ops(log, out, binary)
        return
    loaded = sys.modules.get("deep_gemm")
    if loaded is not None:  # an earlier build in this process imported it
        if isinstance(getattr(loaded, "_C", None), UnloadedLibrary):
            out.lines.append(_deep_gemm_line(loaded._C._why))
        return
    why = loads(str(binary)) if binary.exists() else "no _C library"
    if not why:
        return
    import tvm_ffi

    real = tvm_ffi.load_module
    # The package's import calls _C.init(package folder, CUDA home), the
    # paths its JIT would compile with (nothing is compiled here); SGLang's
    # DSA indexer asks get_num_sms when it is built: DeepGEMM's default is
    # the device's SM count, which the emulated device answers.
    stand_in = UnloadedLibrary("deep_gemm._C", why, answers={"init": no_op, "get_num_sms": sm_count,
                                                             **DEEP_GEMM_DRY})

    def load_module(path, *args, **kwargs):
        if Path(path) == binary:
            return stand_in
        return real(path, *args, **kwargs)

    with UndoLog() as scoped:  # only while DeepGEMM imports
        scoped.setattr(tvm_ffi, "load_module", load_module)
        importlib.import_module("deep_gemm")
    out.lines.append(_deep_gemm_line(why))


def _deep_gemm_ops(log: UndoLog, out: StandIns, binary: Path) -> None:
    """DeepGEMM as a torch op library: the older one (bundled with sgl-kernel
    0.3), whose package imports ``deep_gemm_cpp`` (which registers the
    ``torch.ops.deep_gemm`` ops) and binds every op by name at import, or
    0.2.3, whose package loads ``_C.so`` by path. Stand-in: an empty module
    of that name, or a load of that path that does nothing, and every schema
    the binary declares, with no kernel; ``init`` does
    nothing, ``get_num_sms`` answers the device's SM count, and the ops that
    only write their arguments do nothing (what a dry kernel does). Undone
    with ``log``; a later build in the process declares them again, and the
    ops the package bound at its import answer again."""
    why = loads(str(binary))
    if not why:
        return
    schemas = schemas_in(binary)
    if not any(text.startswith("init(") for text in schemas):
        raise RuntimeError(f"{binary.name} does not load here ({why}) and declares no DeepGEMM ops to stand in for")
    silent = [text.split("(", 1)[0] for text in schemas if text.endswith("-> ()")]
    if not declared("deep_gemm::init"):
        library = op_library(log, "deep_gemm")
        for text in schemas:
            library.define(text)
        for name in silent:
            library.impl(name, no_op, "CompositeExplicitAutograd")
        library.impl("get_num_sms", sm_count, "CompositeExplicitAutograd")
        for name, dry in DEEP_GEMM_DRY.items():
            if any(text.startswith(f"{name}(") for text in schemas):
                library.impl(name, dry, "CompositeExplicitAutograd")
    if binary.name == "_C.so":  # the package loads it by path when it is imported
        no_load_of(log, {str(binary.resolve())})
    elif "deep_gemm" not in sys.modules:
        empty_module(log, "deep_gemm.deep_gemm_cpp", "DeepGEMM's deep_gemm_cpp")
    out.lines.append(f"deep_gemm::{{{len(schemas)} ops}}: the schemas {binary.name} declares, no kernel; init and the "
                     f"{len(silent) - 1} ops that only write their arguments do nothing, get_num_sms answers the "
                     f"device's SM count, {', '.join(DEEP_GEMM_DRY)} return an empty tensor of their output's shape "
                     f"(the library does not load here: {why})")


def _op_library(binary: Path) -> bool:
    """Whether ``binary`` is a torch op library of DeepGEMM's (it declares
    the ``init`` schema every DeepGEMM op library has), not a tvm-ffi module."""
    return any(text.startswith("init(") for text in schemas_in(binary))


def _deep_gemm_line(why: str) -> str:
    return (f"deep_gemm._C: every function found, no kernel runs; init (its JIT's paths) does nothing, "
            f"get_num_sms answers the device's SM count, {', '.join(DEEP_GEMM_DRY)} return an empty tensor of "
            f"their output's shape (the library does not load here: {why})")


def _paged_mqa_schedule(context_lens: torch.Tensor, block_kv: int, num_sms: int, *args, **kwargs) -> torch.Tensor:
    """DeepGEMM's paged-MQA-logits scheduler output, as its kernel shapes it:
    one (start, end) pair of int32 per SM plus one, on the lengths' device.
    Its values are the kernel's; on a fake device there are none to compute."""
    return torch.empty((num_sms + 1, 2), dtype=torch.int32, device=context_lens.device)


def _mqa_logits(q: torch.Tensor, kv, *args, **kwargs) -> torch.Tensor:
    """DeepGEMM's fp8 MQA logits, dry: ``[query tokens, key tokens]`` float32."""
    keys = kv[0] if isinstance(kv, (tuple, list)) else kv
    return torch.empty((q.shape[0], keys.shape[0]), dtype=torch.float32, device=q.device)


def _paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                      block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int, *args,
                      **kwargs) -> torch.Tensor:
    """DeepGEMM's fp8 paged MQA logits, dry: ``[batch * next_n, max_context_len]``
    float32 for a ``[batch, next_n, heads, dim]`` query (the shape SGLang gives
    its own buffer for this kernel's output on other platforms)."""
    return torch.empty((q.shape[0] * q.shape[1], max_context_len), dtype=torch.float32, device=q.device)


# DeepGEMM kernels the DSA indexer calls that return a tensor: each answers
# with an empty tensor of the kernel's output shape, values not computed (what
# a dry launch on fake tensors gives).
DEEP_GEMM_DRY = {
    "get_paged_mqa_logits_metadata": _paged_mqa_schedule,
    "fp8_mqa_logits": _mqa_logits,
    "fp8_paged_mqa_logits": _paged_mqa_logits,
}

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
        if any(text.startswith("get_tma_aligned_size(") for text in schemas):
            library.impl("get_tma_aligned_size", _tma_aligned, "CompositeExplicitAutograd")
        for name, dry in DEEP_GEMM_DRY.items():
            if any(text.startswith(f"{name}(") for text in schemas):
                library.impl(name, dry, "CompositeExplicitAutograd")
        _rebind(log)
    if binary.name == "_C.so":  # the package loads it by path when it is imported
        no_load_of(log, {str(binary.resolve())})
    elif "deep_gemm" not in sys.modules:
        empty_module(log, "deep_gemm.deep_gemm_cpp", "DeepGEMM's deep_gemm_cpp")
    dry = [name for name in DEEP_GEMM_DRY if any(text.startswith(f"{name}(") for text in schemas)]
    out.lines.append(f"deep_gemm::{{{len(schemas)} ops}}: the schemas {binary.name} declares, no kernel; init and the "
                     f"{len(silent) - 1} ops that only write their arguments do nothing, get_num_sms answers the "
                     f"device's SM count, get_tma_aligned_size DeepGEMM's 16-byte alignment; {', '.join(dry)} "
                     f"return an empty tensor of their output's shape and layout (the library does not load here: "
                     f"{why})")


def _rebind(log: UndoLog) -> None:
    """A DeepGEMM package imported by an earlier build in this process keeps
    the operator objects it bound then, whose declarations that build's
    undo removed: each is bound again to the operator of the same name just
    declared (undone with ``log``)."""
    from torch._library.utils import lookup_op

    for name, module in list(sys.modules.items()):
        if module is None or not (name == "deep_gemm" or name.startswith("deep_gemm.")):
            continue
        names = getattr(module, "__dict__", None) or {}
        holders = [module] + [value for value in names.values() if type(value).__name__ == "_TorchOps"]
        for holder in holders:
            for attr, value in list((getattr(holder, "__dict__", None) or {}).items()):
                if isinstance(value, torch._ops.OpOverload) and value.namespace == "deep_gemm":
                    log.setattr(holder, attr, lookup_op(f"{value._schema.name}.{value._overloadname}"))


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


def _tma_aligned(mn: int, element_size: int) -> int:
    """DeepGEMM's TMA alignment: ``mn`` rounded up to 16 bytes of elements."""
    step = 16 // element_size
    return -(-mn // step) * step


def _batched(sf: torch.Tensor) -> tuple[int, int, int]:
    return tuple(sf.shape) if sf.dim() == 3 else (1, *sf.shape)  # type: ignore[return-value]


def _mn_major(sf: torch.Tensor) -> torch.Tensor:
    """DeepGEMM's FP32 scales made MN-major and TMA-aligned: strides
    ``(aligned_mn * k, 1, aligned_mn)``; a tensor already so laid out is
    returned as it is."""
    groups, mn, k = _batched(sf)
    aligned = _tma_aligned(mn, sf.element_size())
    strides = sf.stride() if sf.dim() == 3 else (aligned * k, *sf.stride())
    if strides[1:] == (1, aligned) and (sf.dim() == 2 or strides[0] == aligned * k):
        return sf
    out = torch.empty_strided((groups, mn, k), (aligned * k, 1, aligned), dtype=sf.dtype, device=sf.device)
    return out if sf.dim() == 3 else out.squeeze(0)


def _packed_ue8m0(sf: torch.Tensor, psum_layout: torch.Tensor | None = None) -> torch.Tensor:
    """FP32 scales packed four to an int32 (UE8M0), MN-major and TMA-aligned:
    ``[(groups,) mn, ceil(k / 4)]`` with strides ``(packed * aligned_mn, 1,
    aligned_mn)``."""
    groups, mn, k = _batched(sf)
    packed, aligned = -(-k // 4), _tma_aligned(mn, 4)
    out = torch.empty_strided((groups, mn, packed), (packed * aligned, 1, aligned), dtype=torch.int32,
                              device=sf.device)
    return out if sf.dim() == 3 else out.squeeze(0)


def _k_grouped_packed_ue8m0(sf: torch.Tensor, grouped_layout: torch.Tensor, ks: list[int] | None, gran_k: int,
                            *args, **kwargs) -> torch.Tensor:
    """K-grouped FP32 scales ``[sf_k, mn]`` packed to ``[packed_k, mn]`` int32:
    each group's ``k / gran_k`` scales rounded up to fours, or, without the
    groups' sizes, room for three pads a group."""
    sf_k, mn = sf.shape
    packed = (sum(-(-(k // gran_k) // 4) for k in ks) if ks
              else (sf_k + grouped_layout.numel() * 3) // 4)
    return torch.empty((packed, mn), dtype=torch.int32, device=sf.device)


def _required_layout(sf: torch.Tensor, mn: int, k: int, recipe_a: int, recipe_b: int, recipe_c: int | None = None,
                     num_groups: int | None = None, is_sfa: bool | None = None, disable_ue8m0_cast: bool = False,
                     psum_layout: torch.Tensor | None = None) -> torch.Tensor:
    """The scale layout DeepGEMM's GEMMs want, by its rules: on SM90 (or with
    the UE8M0 cast off) per-token FP32 scales MN-major and 128x128 blocks as
    they are; on SM100 and SM120 FP32 scales broadcast to one a row and
    packed to UE8M0, packed int32 ones as they are."""
    major = torch.cuda.get_device_capability()[0]
    gran_mn, gran_k = ((recipe_a if is_sfa else recipe_b), recipe_c) if recipe_c is not None else (recipe_a, recipe_b)
    if sf.dtype == torch.float32 and gran_k == 128 and (major == 9 or disable_ue8m0_cast):
        if gran_mn == 1:
            return _mn_major(sf)
        if gran_mn == 128:
            return sf
    if sf.dtype == torch.float32 and gran_k in (32, 128) and major in (10, 12):
        rows = sf if gran_mn == 1 else torch.empty((*sf.shape[:-2], mn, sf.shape[-1]), dtype=sf.dtype,
                                                   device=sf.device)
        return _packed_ue8m0(rows)
    if sf.dtype == torch.int32 and gran_mn == 1 and gran_k in (32, 128) and major in (10, 12):
        return sf
    raise RuntimeError("Unknown SF transformation")  # DeepGEMM's own words for a layout it has no rule for


# DeepGEMM kernels that return a tensor and that SGLang calls: the DSA
# indexer's, and the scale-layout transforms its FP8 GEMMs and MoE run when
# weights are processed. Each answers with an empty tensor of the kernel's
# output shape and layout, values not computed (what a dry launch on fake
# tensors gives).
DEEP_GEMM_DRY = {
    "get_paged_mqa_logits_metadata": _paged_mqa_schedule,
    "fp8_mqa_logits": _mqa_logits,
    "fp8_paged_mqa_logits": _paged_mqa_logits,
    "get_mn_major_tma_aligned_tensor": _mn_major,
    "get_mn_major_tma_aligned_packed_ue8m0_tensor": _packed_ue8m0,
    "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor": _k_grouped_packed_ue8m0,
    "transform_sf_into_required_layout": _required_layout,
}

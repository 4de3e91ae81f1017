"""Stand-ins for the CUDA-only parts of wheels a serving framework imports.

SGLang's wheels ship binaries built against a CUDA build of torch; on this
machine's CPU build they cannot load. Each stand-in below replaces exactly
what the import and the traced code path need from such a binary, and is
installed only when the binary is found not to load (or, for op schemas,
only for ops the installed Python wrappers call). Everything goes through
the undo log; ``install`` returns one line per stand-in, which the findings
list (``target.stand_ins``) so a reader knows what was not real.

- torchvision's ``_C`` (its wheel for torch 2.13 is CUDA-built): torchvision
  swallows the load error, but its ``_meta_registrations`` module registers
  fakes for ``torchvision::nms`` / ``qnms`` at import, which needs the ops to
  exist. The stand-in declares the two schemas, no kernel.
- sgl-kernel's ``common_ops`` library: sgl_kernel's loader tries the
  architecture's ``.so``, then a plain ``import common_ops``; an empty module
  of that name ends its search. The ops the traced code calls
  (``torch.ops.sgl_kernel.*``) are then declared from ``SGL_KERNEL_SCHEMAS``,
  the schema strings compiled into the real binary (a test compares them with
  the installed one); SGLang attaches its own fakes to some at import, the
  rest (kernels that only write their ``Tensor!`` arguments) get a no-op fake
  after the import (``finish``), which is what a dry kernel does.
- sgl-kernel's other kernel libraries (``flash_ops``, ``flashmla_ops``, ...):
  older releases' sparse-attention backend imports sgl-kernel's
  FlashAttention wrapper, which imports ``flash_ops`` at module level. Each
  one that does not load gets an empty module, and none of its ops is declared.
- The older DeepGEMM (bundled with sgl-kernel 0.3, which SGLang 0.5.9 uses):
  ``deep_gemm_cpp``, a torch extension that registers ``torch.ops.deep_gemm``,
  and the package binds every op by name when it is imported. The stand-in
  is an empty module of that name plus every schema the binary declares,
  read from its bytes, with no kernel. ``init`` and the ops that only write
  their arguments do nothing, and ``get_num_sms`` answers the device's SM count.
- DeepGEMM's kernel library (``deep_gemm/_C.so``, a tvm-ffi module linked
  against a CUDA build of torch): the package loads it at import, and some
  SGLang releases import the package at module level (0.5.21's DSA backend).
  The package is imported with tvm-ffi's ``load_module`` answering for that
  one file with ``UnloadedLibrary``: every function the package binds is
  found, and each raises ``StandInCalled`` when called (no kernel), except
  ``init`` (the import calls it with the JIT's paths: nothing done),
  ``get_num_sms`` (the device's SM count, DeepGEMM's default, as the
  emulated device answers it) and the kernels the DSA indexer calls that
  return a tensor (``DEEP_GEMM_DRY``: the paged-MQA scheduler's output, which
  the decode metadata computes before any forward, and the MQA logits): an
  empty tensor of the kernel's output shape, values not computed, as a dry
  launch on fake tensors gives.
- A CUDA runtime library mapped into the process: FlashInfer 0.6's
  ``comm/cuda_ipc.py`` asserts at import that one is; dlopen needs no GPU and
  nothing is called.

See docs/design.md, "SGLang on a CPU build of torch".
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import importlib.util
import os
import re
import site
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from graphbreak_doctor.patching import UndoLog

# The schema strings sgl-kernel's common_ops binary declares (its op library
# "sgl_kernel"), for the ops SGLang's import and its MLP/MoE code paths reach.
SGL_KERNEL_SCHEMAS = {
    "fused_add_rmsnorm": "fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, bool enable_pdl) -> ()",
    "rmsnorm": "rmsnorm(Tensor! output, Tensor input, Tensor weight, float eps, bool enable_pdl) -> ()",
    "silu_and_mul": "silu_and_mul(Tensor! out, Tensor input) -> ()",
    "sgl_per_token_group_quant_8bit": "sgl_per_token_group_quant_8bit(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, float eps, float fp8_min, float fp8_max, bool scale_ue8m0) -> ()",
    "sgl_per_token_quant_fp8": "sgl_per_token_quant_fp8(Tensor input, Tensor! output_q, Tensor! output_s) -> ()",
    "fp8_scaled_mm": "fp8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, ScalarType out_dtype, Tensor? bias) -> Tensor",
    "moe_fused_gate": "moe_fused_gate(Tensor input, Tensor bias, int num_expert_group, int topk_group, int topk, int num_fused_shared_experts, float routed_scaling_factor, bool apply_routed_scaling_factor_on_output) -> (Tensor[])",
    "scaled_fp4_quant": "scaled_fp4_quant(Tensor! output, Tensor! input, Tensor! output_scale, Tensor! input_scale) -> ()",
    # The DSA indexer's top-k (whole decoder layers).
    "fast_topk": "fast_topk(Tensor score, Tensor indices, Tensor lengths, Tensor? row_starts) -> ()",
    "fast_topk_transform_fused": "fast_topk_transform_fused(Tensor score, Tensor lengths, Tensor dst_page_table, Tensor src_page_table, Tensor cu_seqlens_q, Tensor? row_starts) -> ()",
    "fast_topk_transform_ragged_fused": "fast_topk_transform_ragged_fused(Tensor score, Tensor lengths, Tensor topk_indices_ragged, Tensor topk_indices_offset, Tensor ? row_starts) -> ()",
    # MLA's query and key concatenation (older releases' sparse attention).
    "concat_mla_absorb_q": "concat_mla_absorb_q(Tensor a, Tensor b, Tensor! out) -> ()",
    "concat_mla_k": "concat_mla_k(Tensor! k, Tensor k_nope, Tensor k_rope) -> ()",
}

# torchvision/csrc/ops/nms.cpp and ops/quantized/cpu/qnms_kernel.cpp.
TORCHVISION_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}

_SCHEMA = re.compile(rb"(?<![A-Za-z0-9_])([a-z_0-9]+)\(([^\x00]*?)\) -> ([^\x00]*?)\x00")


@dataclass
class StandIns:
    """What was installed, for the findings, and what ``finish`` still does."""

    lines: list[str] = field(default_factory=list)
    # sgl_kernel ops declared here that may still need a fake after the import.
    declared: list[str] = field(default_factory=list)
    library: torch.library.Library | None = None


def _loads(path: str) -> str:
    """'' if the shared library loads here, else the loader's first line."""
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        return str(e).splitlines()[0]
    return ""


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _declared(qualname: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, "")
    except RuntimeError:
        return False
    return True


def _library(log: UndoLog, namespace: str) -> torch.library.Library:
    lib = torch.library.Library(namespace, "FRAGMENT")
    log.call_on_undo(lib._destroy)
    return lib


def _torchvision(log: UndoLog, out: StandIns) -> None:
    home = _package_dir("torchvision")
    if home is None or "torchvision" in sys.modules:
        return
    binaries = sorted(glob.glob(str(home / "_C*.so")))
    why = _loads(binaries[0]) if binaries else "no _C library"
    if not why or all(_declared(f"torchvision::{n}") for n in TORCHVISION_SCHEMAS):
        return
    lib = _library(log, "torchvision")
    for name, schema in TORCHVISION_SCHEMAS.items():
        if not _declared(f"torchvision::{name}"):
            lib.define(schema)
    out.lines.append(f"torchvision::{{{','.join(TORCHVISION_SCHEMAS)}}}: schemas only, no kernel "
                     f"(torchvision's _C does not load here: {why})")


def _sgl_kernel(log: UndoLog, out: StandIns) -> None:
    home = _package_dir("sgl_kernel")
    if home is None:
        return
    binaries = sorted(glob.glob(str(home / "*" / "common_ops.*.so"))) + sorted(glob.glob(str(home / "common_ops.*.so")))
    why = _loads(binaries[0]) if binaries else "no common_ops library"
    if not why:
        return
    if "sgl_kernel" not in sys.modules:  # imported before (an earlier build in this process): it found one
        _empty_module(log, "common_ops", "sgl_kernel's common_ops")
    out.lines.append(f"sgl_kernel common_ops: an empty module (the library does not load here: {why})")
    _sgl_kernel_extensions(log, out, home)
    called = _called_ops(home)
    for name, schema in SGL_KERNEL_SCHEMAS.items():
        if name not in called or _declared(f"sgl_kernel::{name}"):
            continue
        if out.library is None:
            out.library = _library(log, "sgl_kernel")
        out.library.define(schema)
        out.declared.append(name)


def _empty_module(log: UndoLog, name: str, what: str) -> None:
    """An empty module importable as ``name``, standing in for ``what`` (a
    library that does not load here), until ``log`` is undone."""
    module = types.ModuleType(name)
    module.__file__ = f"<graphbreak-doctor stand-in for {what}>"
    log.setitem(sys.modules, name, module)


def _sgl_kernel_extensions(log: UndoLog, out: StandIns, home: Path) -> None:
    """sgl-kernel's other kernel libraries (``flash_ops``, ``flashmla_ops``,
    ...), which some of its wrappers import at module level (its FlashAttention
    wrapper, imported by older releases' sparse-attention backend): an empty
    module for each that does not load here. A library with dry answers
    (``EXTENSION_DRY``) has every schema its binary declares defined: the ops
    that only write their arguments do nothing, the listed ones return empty
    tensors of their outputs' shapes, and any other call fails for want of a
    kernel. The other libraries' ops are not declared: a call fails, naming the op."""
    empty, declared = [], []
    for binary in sorted(home.glob("*_ops.*.so")):
        name = binary.name.split(".", 1)[0]
        qualified = f"sgl_kernel.{name}"
        if name == "common_ops" or qualified in sys.modules:
            continue
        why = _loads(str(binary))
        if not why:
            continue
        _empty_module(log, qualified, f"sgl_kernel's {name}")
        if name in EXTENSION_DRY:
            declared.append((name, _declare_dry(log, out, binary, EXTENSION_DRY[name])))
        else:
            empty.append((name, why))
    if empty:
        out.lines.append(f"sgl_kernel.{{{', '.join(n for n, _ in empty)}}}: empty modules, no op declared (the "
                         f"libraries do not load here: {empty[0][1]})")
    for name, ops in declared:
        dry = ", ".join(EXTENSION_DRY[name])
        out.lines.append(f"sgl_kernel.{name}: an empty module and the {len(ops)} op schemas its binary declares, no "
                         f"kernel; {dry} return empty tensors of their outputs' shapes, the ops that only write their "
                         "arguments do nothing (the library does not load here)")


def _declare_dry(log: UndoLog, out: StandIns, binary: Path, dry: dict) -> list[str]:
    """Define the ``sgl_kernel`` ops ``binary`` declares that are not yet,
    with ``dry``'s answers and no-ops for those returning nothing."""
    schemas = [m.group(0)[:-1].decode() for m in _SCHEMA.finditer(binary.read_bytes())]
    names = []
    for text in schemas:
        name = text.split("(", 1)[0]
        if name in names or _declared(f"sgl_kernel::{name}"):
            continue
        if out.library is None:
            out.library = _library(log, "sgl_kernel")
        out.library.define(text)
        if name in dry:
            out.library.impl(name, dry[name], "CompositeExplicitAutograd")
        elif text.endswith("-> ()"):
            out.library.impl(name, _no_op, "CompositeExplicitAutograd")
        names.append(name)
    return names


def _called_ops(home: Path) -> set[str]:
    """The sgl_kernel ops the installed package's Python wrappers call: an op
    the binary of this version lacks is never declared."""
    called: set[str] = set()
    for path in home.glob("*.py"):
        called.update(re.findall(r"torch\.ops\.sgl_kernel\.([A-Za-z_0-9]+)", path.read_text(errors="replace")))
    return called


class StandInCalled(RuntimeError):
    """A stand-in without a kernel was called: the traced code needs what
    this machine cannot run."""


class UnloadedLibrary:
    """A kernel library that does not load here: each function is found, and
    raises StandInCalled when called, except those ``answers`` names (device
    queries and set-up calls the emulation can answer)."""

    def __init__(self, name: str, why: str, answers: dict | None = None) -> None:
        self._name, self._why, self._answers = name, why, answers or {}

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in self._answers:
            return self._answers[attr]
        name, why = self._name, self._why

        def unavailable(*args, **kwargs):
            raise StandInCalled(f"{name}.{attr} was called: the library does not load here ({why}) and its "
                                "stand-in has no kernel")

        unavailable.__name__ = unavailable.__qualname__ = attr
        return unavailable


def _deep_gemm(log: UndoLog, out: StandIns) -> None:
    home = _package_dir("deep_gemm")
    if home is None:
        return
    ops_library = sorted(home.glob("deep_gemm_cpp*.so"))
    if ops_library:  # the older DeepGEMM: a torch op library
        _deep_gemm_ops(log, out, ops_library[0])
        return
    binary = home / "_C.so"
    loaded = sys.modules.get("deep_gemm")
    if loaded is not None:  # an earlier build in this process imported it
        if isinstance(getattr(loaded, "_C", None), UnloadedLibrary):
            out.lines.append(_deep_gemm_line(loaded._C._why))
        return
    why = _loads(str(binary)) if binary.exists() else "no _C library"
    if not why:
        return
    import tvm_ffi

    real = tvm_ffi.load_module
    # The package's import calls _C.init(package folder, CUDA home), the
    # paths its JIT would compile with (nothing is compiled here); SGLang's
    # DSA indexer asks get_num_sms when it is built: DeepGEMM's default is
    # the device's SM count, which the emulated device answers.
    stand_in = UnloadedLibrary("deep_gemm._C", why, answers={"init": _no_op, "get_num_sms": _sm_count,
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
    """The older DeepGEMM (bundled with sgl-kernel 0.3): its package imports
    ``deep_gemm_cpp``, which registers the ``torch.ops.deep_gemm`` ops, and
    binds every op by name at import. Stand-in: an empty module of that name
    and every schema the binary declares, with no kernel; ``init`` does
    nothing, ``get_num_sms`` answers the device's SM count, and the ops that
    only write their arguments do nothing (what a dry kernel does). Undone
    with ``log``; a later build in the process declares them again, and the
    ops the package bound at its import answer again."""
    why = _loads(str(binary))
    if not why:
        return
    schemas = [m.group(0)[:-1].decode() for m in _SCHEMA.finditer(binary.read_bytes())]
    if not any(text.startswith("init(") for text in schemas):
        raise RuntimeError(f"{binary.name} does not load here ({why}) and declares no DeepGEMM ops to stand in for")
    silent = [text.split("(", 1)[0] for text in schemas if text.endswith("-> ()")]
    if not _declared("deep_gemm::init"):
        library = _library(log, "deep_gemm")
        for text in schemas:
            library.define(text)
        for name in silent:
            library.impl(name, _no_op, "CompositeExplicitAutograd")
        library.impl("get_num_sms", _sm_count, "CompositeExplicitAutograd")
        for name, dry in DEEP_GEMM_DRY.items():
            if any(text.startswith(f"{name}(") for text in schemas):
                library.impl(name, dry, "CompositeExplicitAutograd")
    if "deep_gemm" not in sys.modules:
        _empty_module(log, "deep_gemm.deep_gemm_cpp", "DeepGEMM's deep_gemm_cpp")
    out.lines.append(f"deep_gemm::{{{len(schemas)} ops}}: the schemas {binary.name} declares, no kernel; init and the "
                     f"{len(silent) - 1} ops that only write their arguments do nothing, get_num_sms answers the "
                     f"device's SM count, {', '.join(DEEP_GEMM_DRY)} return an empty tensor of their output's shape "
                     f"(the library does not load here: {why})")


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


# FlashMLA's tile-scheduler metadata: int32 rows of this many fields, one
# row per SM part; its kernels split the SMs into parts of 64 query heads.
_FLASHMLA_TILE_FIELDS = 8
_FLASHMLA_BLOCK_M = 64


def _flashmla_metadata(seqlens_k: torch.Tensor, q_per_head_k: int, heads_k: int, *args, **kwargs) -> list:
    """FlashMLA's decoding metadata, dry: ``[tile scheduler (SM parts, 8),
    splits (batch + 1)]`` int32, shaped as its scheduler shapes them."""
    parts = max(_sm_count() // heads_k // -(-q_per_head_k // _FLASHMLA_BLOCK_M), 1)
    return [torch.empty((parts, _FLASHMLA_TILE_FIELDS), dtype=torch.int32, device=seqlens_k.device),
            torch.empty((seqlens_k.shape[0] + 1,), dtype=torch.int32, device=seqlens_k.device)]


def _flashmla_decode(q: torch.Tensor, kv_cache: torch.Tensor, head_size_v: int, *args, **kwargs) -> list:
    """FlashMLA's paged decode, dry: ``[out (batch, q tokens, heads, dv),
    lse (batch, heads, q tokens) float32]``; an FP8 query gives a bf16 output."""
    batch, tokens, heads = q.shape[0], q.shape[1], q.shape[2]
    dtype = torch.bfloat16 if q.element_size() == 1 else q.dtype
    return [torch.empty((batch, tokens, heads, head_size_v), dtype=dtype, device=q.device),
            torch.empty((batch, heads, tokens), dtype=torch.float32, device=q.device)]


def _flashmla_sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                             d_v: int) -> list:
    """FlashMLA's sparse prefill, dry: ``[out (tokens, heads, d_v), max logits
    (tokens, heads) float32, lse (tokens, heads) float32]``."""
    tokens, heads = q.shape[0], q.shape[1]
    return [torch.empty((tokens, heads, d_v), dtype=q.dtype, device=q.device),
            torch.empty((tokens, heads), dtype=torch.float32, device=q.device),
            torch.empty((tokens, heads), dtype=torch.float32, device=q.device)]


# sgl-kernel's other libraries whose ops get dry answers (see
# _sgl_kernel_extensions): FlashMLA, which older releases' sparse attention
# calls for its metadata and kernels.
EXTENSION_DRY = {
    "flashmla_ops": {
        "get_mla_decoding_metadata": _flashmla_metadata,
        "get_mla_decoding_metadata_dense_fp8": _flashmla_metadata,
        "fwd_kvcache_mla": _flashmla_decode,
        "fwd_kvcache_mla_fp8": _flashmla_decode,
        "sparse_prefill_fwd": _flashmla_sparse_prefill,
    },
}


def _sm_count() -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _cuda_runtime(log: UndoLog, out: StandIns) -> None:
    """Map a CUDA runtime library when FlashInfer's comm module refuses to
    import without one (FlashInfer 0.6)."""
    if importlib.util.find_spec("flashinfer") is None or "flashinfer.comm" in sys.modules:
        return
    try:
        importlib.import_module("flashinfer.comm")
        return
    except AssertionError as e:
        if "libcudart" not in str(e):
            raise
        why = str(e).splitlines()[0]
    candidates = []
    for root in site.getsitepackages():
        candidates += sorted(glob.glob(os.path.join(root, "*.libs", "libcudart*.so*")))
        candidates += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcudart.so*")))
    if not candidates:
        raise RuntimeError(f"flashinfer.comm needs a CUDA runtime library mapped ({why}) and none is installed")
    handle = ctypes.CDLL(candidates[0], mode=ctypes.RTLD_LOCAL)
    log.call_on_undo(lambda: _dlclose(handle))
    importlib.import_module("flashinfer.comm")
    out.lines.append(f"{os.path.basename(candidates[0])} mapped, never called (flashinfer.comm asserts a CUDA "
                     f"runtime is loaded: {why})")


def _dlclose(handle: ctypes.CDLL) -> None:
    import _ctypes

    _ctypes.dlclose(handle._handle)


def install(log: UndoLog) -> StandIns:
    """Install what this machine lacks, before the framework is imported."""
    out = StandIns()
    if torch.backends.cuda.is_built():
        return out  # a CUDA build of torch loads the real binaries
    _torchvision(log, out)
    _sgl_kernel(log, out)
    _deep_gemm(log, out)
    _cuda_runtime(log, out)
    return out


def finish(out: StandIns) -> None:
    """After the framework's import: give each declared op that still has no
    fake a no-op one (only kernels that return nothing and write their
    ``Tensor!`` arguments are declared without a fake of their own)."""
    theirs, ours = [], []
    for name in out.declared:
        qualname = f"sgl_kernel::{name}"
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta") or _has_fake(qualname):
            theirs.append(name)
            continue
        if getattr(torch.ops.sgl_kernel, name).default._schema.returns:
            raise RuntimeError(f"{qualname} returns values and has no fake: no stand-in can answer for it")
        torch.library.register_fake(qualname, _no_op, lib=out.library)
        ours.append(name)
    if ours:
        out.lines.append(f"sgl_kernel::{{{', '.join(ours)}}}: the library's schemas, no kernel, a no-op fake "
                         "(kernels that only write their Tensor! arguments)")
    if theirs:
        out.lines.append(f"sgl_kernel::{{{', '.join(theirs)}}}: the library's schemas, no kernel (the framework "
                         "registers their fakes)")


def _has_fake(qualname: str) -> bool:
    from torch._library import simple_registry

    return simple_registry.singleton.find(qualname).fake_impl.kernel is not None


def _no_op(*args, **kwargs) -> None:
    return None


def binary_schemas(path: str | Path, names: tuple[str, ...] = tuple(SGL_KERNEL_SCHEMAS)) -> dict[str, str]:
    """The schema strings an op library declares for ``names``, whitespace
    normalized (what a test compares ``SGL_KERNEL_SCHEMAS`` with)."""
    data = Path(path).read_bytes()
    out: dict[str, str] = {}
    for name in names:
        start = data.find(b"\x00" + name.encode() + b"(")
        while start >= 0:
            end = data.find(b"\x00", start + 1)
            m = _SCHEMA.fullmatch(data[start + 1:end + 1])
            if m:
                out[name] = " ".join(m.group(0)[:-1].decode().split())
                break
            start = data.find(b"\x00" + name.encode() + b"(", start + 1)
    return out

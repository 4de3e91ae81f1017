"""sgl-kernel's kernel libraries, which need a CUDA build of torch.

- ``common_ops``: sgl_kernel's loader tries the architecture's ``.so``, then
  a plain ``import common_ops``; an empty module of that name ends its
  search. Every op schema the installed ``common_ops`` binaries declare
  (read from their bytes, ``schemas_in`` in schemas.py) is then declared in
  ``torch.ops.sgl_kernel``, with no kernel, whatever model the framework
  serves; a schema this torch cannot parse is left out, and a line says
  which. Ops the binary registers by name only (their schema inferred from
  the C++ function) hold no schema string and are not declared. Fakes come
  after the framework's import (``register_missing_fakes`` in the package):
  the framework's own for the ops whose outputs need them, a no-op one for
  the ops that only write their arguments.
- The other libraries (``flash_ops``, ``flashmla_ops``, ...): older
  releases' sparse-attention backend imports sgl-kernel's FlashAttention
  wrapper, which imports ``flash_ops`` at module level. Each one that does
  not load gets an empty module; a library with dry answers
  (``EXTENSION_DRY``: FlashMLA's) has every schema its binary declares
  defined, and none of the others' ops is declared."""

from __future__ import annotations

import glob
import sys
from typing import Any
from pathlib import Path

import torch

from graphbreak_doctor.emulation.standins import custom_all_reduce
from graphbreak_doctor.emulation.standins.binaries import (
    StandIns, declared, empty_module, loads, no_op, package_dir, sm_count,
)
from graphbreak_doctor.emulation.standins.schemas import schemas_in
from graphbreak_doctor.patching import UndoLog


def install_sgl_kernel(log: UndoLog, out: StandIns) -> None:
    home = package_dir("sgl_kernel")
    if home is None:
        return
    binaries = sorted(glob.glob(str(home / "*" / "common_ops.*.so"))) + sorted(glob.glob(str(home / "common_ops.*.so")))
    why = loads(binaries[0]) if binaries else "no common_ops library"
    if not why:
        return
    if "sgl_kernel" not in sys.modules:  # imported before (an earlier build in this process): it found one
        empty_module(log, "common_ops", "sgl_kernel's common_ops")
    out.lines.append(f"sgl_kernel common_ops: an empty module (the library does not load here: {why})")
    _sgl_kernel_extensions(log, out, home)
    declare_common_ops(log, out, [Path(b) for b in binaries])
    custom_all_reduce.install(log, out, "sgl_kernel")


def declare_common_ops(log: UndoLog, out: StandIns, binaries: list[Path]) -> None:
    """Declare, schema only, every op ``binaries`` (the ``common_ops`` of each
    architecture) declare that this process lacks; the first binary to
    declare a name gives its schema. A schema this torch cannot parse is
    skipped, and a line of ``out`` names it and the parser's reason."""
    seen: set[str] = set()
    unparsed: list[tuple[str, str]] = []
    for binary in binaries:
        for text in schemas_in(binary):
            name = text.split("(", 1)[0]
            if name in seen:
                continue
            seen.add(name)
            if declared(f"sgl_kernel::{name}"):
                continue
            why = _define(log, out, text)
            if why:
                unparsed.append((name, why))
                continue
            out.declared.append(f"sgl_kernel::{name}")
    _unparsed_line(out, "common_ops", unparsed)


def _define(log: UndoLog, out: StandIns, text: str, namespace: str = "sgl_kernel") -> str:
    """Define ``text`` in the stand-in's ``namespace`` library: '' when
    defined, else why this torch refuses it (its parser's first sentence)."""
    try:
        out.library(log, namespace).define(text)
    except Exception as e:  # any schema this torch refuses is left out, and named
        line = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        return line.split(". ", 1)[0].rstrip(":")
    return ""


def _unparsed_line(out: StandIns, library: str, unparsed: list[tuple[str, str]],
                   namespace: str = "sgl_kernel") -> None:
    if unparsed:
        names = ", ".join(n for n, _ in unparsed)
        out.lines.append(f"{namespace}::{{{names}}}: not declared, this torch cannot parse the schemas {library} "
                         f"declares for them ({unparsed[0][1]})")


def _sgl_kernel_extensions(log: UndoLog, out: StandIns, home: Path) -> None:
    """sgl-kernel's other kernel libraries (``flash_ops``, ``flashmla_ops``,
    ...), which some of its wrappers import at module level (its FlashAttention
    wrapper, imported by older releases' sparse-attention backend): an empty
    module for each that does not load here. A library with dry answers
    (``EXTENSION_DRY``) has every schema its binary declares defined: the ops
    that only write their arguments do nothing, the listed ones return empty
    tensors of their outputs' shapes, and any other call fails for want of a
    kernel. The other libraries' ops are not declared: a call fails, naming the op."""
    empty, declared_dry = [], []
    for binary in sorted(home.glob("*_ops.*.so")):
        name = binary.name.split(".", 1)[0]
        qualified = f"sgl_kernel.{name}"
        if name == "common_ops" or qualified in sys.modules:
            continue
        why = loads(str(binary))
        if not why:
            continue
        empty_module(log, qualified, f"sgl_kernel's {name}")
        if name in EXTENSION_DRY:
            declared_dry.append((name, declare_dry(log, out, binary, EXTENSION_DRY[name])))
        else:
            empty.append((name, why))
    if empty:
        out.lines.append(f"sgl_kernel.{{{', '.join(n for n, _ in empty)}}}: empty modules, no op declared (the "
                         f"libraries do not load here: {empty[0][1]})")
    for name, ops in declared_dry:
        dry = ", ".join(EXTENSION_DRY[name])
        out.lines.append(f"sgl_kernel.{name}: an empty module and the {len(ops)} op schemas its binary declares, no "
                         f"kernel; {dry} return empty tensors of their outputs' shapes, the ops that only write their "
                         "arguments do nothing (the library does not load here)")


def declare_dry(log: UndoLog, out: StandIns, binary: Path, dry: dict, namespace: str = "sgl_kernel") -> list[str]:
    """Define in ``namespace`` the ops ``binary`` declares that are not yet,
    with ``dry``'s answers and no-ops for those returning nothing (a schema
    this torch cannot parse is left out, named in a line of ``out``)."""
    names, unparsed = [], []
    for text in schemas_in(binary):
        name = text.split("(", 1)[0]
        if name in names or declared(f"{namespace}::{name}"):
            continue
        why = _define(log, out, text, namespace)
        if why:
            unparsed.append((name, why))
            continue
        if name in dry:
            out.library(log, namespace).impl(name, dry[name], "CompositeExplicitAutograd")
        elif text.endswith("-> ()"):
            out.library(log, namespace).impl(name, no_op, "CompositeExplicitAutograd")
        names.append(name)
    _unparsed_line(out, binary.name.split(".", 1)[0], unparsed, namespace)
    return names


# FlashMLA's tile-scheduler metadata: int32 rows of this many fields, one
# row per SM part; its kernels split the SMs into parts of 64 query heads.
_FLASHMLA_TILE_FIELDS = 8
_FLASHMLA_BLOCK_M = 64


def flashmla_metadata(seqlens_k: torch.Tensor, q_per_head_k: int, heads_k: int, *args, **kwargs) -> list:
    """FlashMLA's decoding metadata, dry: ``[tile scheduler (SM parts, 8),
    splits (batch + 1)]`` int32, shaped as its scheduler shapes them."""
    parts = max(sm_count() // heads_k // -(-q_per_head_k // _FLASHMLA_BLOCK_M), 1)
    return [torch.empty((parts, _FLASHMLA_TILE_FIELDS), dtype=torch.int32, device=seqlens_k.device),
            torch.empty((seqlens_k.shape[0] + 1,), dtype=torch.int32, device=seqlens_k.device)]


def flashmla_decode(q: torch.Tensor, kv_cache: torch.Tensor, head_size_v: int, *args, **kwargs) -> list:
    """FlashMLA's paged decode, dry: ``[out (batch, q tokens, heads, dv),
    lse (batch, heads, q tokens) float32]``; an FP8 query gives a bf16 output."""
    batch, tokens, heads = q.shape[0], q.shape[1], q.shape[2]
    dtype = torch.bfloat16 if q.element_size() == 1 else q.dtype
    return [torch.empty((batch, tokens, heads, head_size_v), dtype=dtype, device=q.device),
            torch.empty((batch, heads, tokens), dtype=torch.float32, device=q.device)]


def flashmla_sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                             d_v: int) -> list:
    """FlashMLA's sparse prefill, dry: ``[out (tokens, heads, d_v), max logits
    (tokens, heads) float32, lse (tokens, heads) float32]``."""
    tokens, heads = q.shape[0], q.shape[1]
    return [torch.empty((tokens, heads, d_v), dtype=q.dtype, device=q.device),
            torch.empty((tokens, heads), dtype=torch.float32, device=q.device),
            torch.empty((tokens, heads), dtype=torch.float32, device=q.device)]


def _fa3_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_new, v_new, q_v, out, cu_seqlens_q,
                 *args, **kwargs) -> tuple:
    """FlashAttention 3's forward (sgl-kernel's ``fwd``: the FA3 attention
    backend SGLang picks on Hopper), dry: ``(out, softmax_lse, out_accum,
    softmax_lse_accum)``. ``out`` is the given buffer, else shaped as the
    query with the value's head size (an FP8 query gives bf16); the
    log-sum-exp is float32, ``(heads, tokens)`` for a packed (varlen) query,
    ``(batch, heads, tokens)`` for a batched one; no split ran, so the
    accumulators are empty."""
    dtype = torch.bfloat16 if q.element_size() == 1 else q.dtype
    if out is None:
        out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=dtype, device=q.device)
    if q.dim() == 3:  # packed: (tokens, heads, head size)
        lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    else:  # batched: (batch, tokens, heads, head size)
        lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    nothing = torch.empty((0,), dtype=torch.float32, device=q.device)
    return out, lse, nothing, nothing.clone()


def _fa3_scheduler_metadata(batch_size: int, max_seqlen_q: int, max_seqlen_k: int, num_heads: int,
                            num_heads_k: int, headdim: int, headdim_v: int, qkv_dtype: Any,
                            seqused_k: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """FlashAttention 3's scheduler metadata (``get_scheduler_metadata``: the
    tile schedule SGLang plans before a decode batch and hands back to
    ``fwd``), dry: an int32 buffer of one entry per batch row and one more,
    on the batch's device. Its layout is the scheduler's own; only the
    forward reads it, and the dry forward does not."""
    return torch.empty((int(batch_size) + 1,), dtype=torch.int32, device=seqused_k.device)


# sgl-kernel's other libraries whose ops get dry answers (see
# _sgl_kernel_extensions): FlashMLA, which older releases' sparse attention
# calls for its metadata and kernels; FlashAttention 3, SGLang's attention
# backend on Hopper.
EXTENSION_DRY = {
    "flash_ops": {
        "fwd": _fa3_forward,
        "get_scheduler_metadata": _fa3_scheduler_metadata,
    },
    "flashmla_ops": {
        "get_mla_decoding_metadata": flashmla_metadata,
        "get_mla_decoding_metadata_dense_fp8": flashmla_metadata,
        "fwd_kvcache_mla": flashmla_decode,
        "fwd_kvcache_mla_fp8": flashmla_decode,
        "sparse_prefill_fwd": flashmla_sparse_prefill,
    },
}

"""FlashMLA's kernel libraries from the ``sgl-flash-mla`` wheel (the
``flash_mla`` package), which need a CUDA build of torch.

SGLang 0.5.23 calls FlashMLA through this wheel (its own requirement)
rather than through sgl-kernel: the DSA attention's sparse prefill on
Hopper, and its paged decode. The package's Python loads two op libraries by
path (``torch.ops.load_library``), each registering its ops in one
namespace: ``cuda`` the current kernels (``torch.ops.flash_mla``),
``_C_legacy`` the kernels kept from before FlashMLA dropped them -- SM90 and
the older KV-cache formats (``torch.ops.flash_mla_legacy``). Neither loads
here. For each one that does not, its load does nothing and every schema its
bytes declare is defined in its namespace (``declare_dry``): the ops that
only write their arguments do nothing, the metadata, decode and prefill
kernels return empty tensors of the shapes the package's wrappers document,
any other call fails for want of a kernel. The package's own Python runs
unchanged on top. A library of the package that is in no namespace below is
not stood in, and a line says so."""

from __future__ import annotations

from typing import Optional

import torch

from graphbreak_doctor.emulation.standins.binaries import StandIns, loads, no_load_of, package_dir
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets.frameworks.sglang.sgl_kernel_libs import (
    declare_dry, flashmla_decode, flashmla_metadata, flashmla_sparse_prefill,
)

PACKAGE = "flash_mla"
# A library's file stem -> the op namespace it registers (the package's loader).
NAMESPACES = {"cuda": "flash_mla", "_C_legacy": "flash_mla_legacy"}


def _sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int,
                    attn_sink: Optional[torch.Tensor] = None, topk_length: Optional[torch.Tensor] = None,
                    return_log2_stats: bool = False, return_stats: bool = True) -> list:
    """The sparse prefill, dry: ``[out (tokens, heads, d_v), max logits,
    lse]``; the statistics are none where the caller asked for none (the
    legacy kernel's ``return_stats``)."""
    out, max_logits, lse = flashmla_sparse_prefill(q, kv, indices, sm_scale, d_v)
    return [out, max_logits, lse] if return_stats else [out, None, None]


def _with_schedule(out_lse: list, q: torch.Tensor, heads_k: int, schedule: Optional[torch.Tensor],
                   splits: Optional[torch.Tensor]) -> tuple:
    """A decode's ``(out, lse, tile scheduler, splits)``: the schedule the
    caller passed, else the one the kernel makes on its first call."""
    if schedule is None or splits is None:
        seqlens = torch.empty((q.shape[0],), dtype=torch.int32, device=q.device)
        schedule, splits = flashmla_metadata(seqlens, q.shape[1] * q.shape[2] // max(heads_k, 1), heads_k)
    return out_lse[0], out_lse[1], schedule, splits


def _sparse_decode(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, topk_length, attn_sink,
                   schedule: Optional[torch.Tensor], splits: Optional[torch.Tensor], extra_kv, extra_indices,
                   extra_topk_length, d_v: int, *args, **kwargs) -> tuple:
    """The sparse paged decode, dry: ``(out (batch, q tokens, heads, d_v),
    lse (batch, heads, q tokens), tile scheduler, splits)``."""
    return _with_schedule(flashmla_decode(q, kv, d_v), q, kv.shape[2], schedule, splits)


def _dense_decode(q: torch.Tensor, kcache: torch.Tensor, head_size_v: int, seqlens_k, block_table, softmax_scale,
                  is_causal, schedule: Optional[torch.Tensor], splits: Optional[torch.Tensor]) -> tuple:
    """The dense paged decode, dry, returned as the sparse one's."""
    return _with_schedule(flashmla_decode(q, kcache, head_size_v), q, kcache.shape[2], schedule, splits)


# The ops with dry answers, in either namespace (the schemas differ in their
# trailing options, which the answers take as they come).
DRY = {
    "get_mla_decoding_metadata": flashmla_metadata,
    "get_mla_decoding_metadata_dense_fp8": flashmla_metadata,
    "fwd_kvcache_mla_fp8": flashmla_decode,
    "sparse_decode_fwd": _sparse_decode,
    "dense_decode_fwd": _dense_decode,
    "sparse_prefill_fwd": _sparse_prefill,
}


def install_flash_mla(log: UndoLog, out: StandIns) -> None:
    home = package_dir(PACKAGE)
    if home is None:
        return
    stood_in: set[str] = set()
    for binary in sorted(home.glob("*.so")):
        why = loads(str(binary))
        if not why:
            continue
        stem = binary.name.split(".", 1)[0]
        namespace = NAMESPACES.get(stem)
        if namespace is None:
            out.lines.append(f"{PACKAGE}/{binary.name}: not stood in, no op namespace is known for it (the "
                             f"library does not load here: {why})")
            continue
        ops = declare_dry(log, out, binary, DRY, namespace)
        stood_in.add(str(binary.resolve()))
        answered = ", ".join(sorted(set(DRY) & set(ops)))
        out.lines.append(f"{PACKAGE}/{binary.name}: {namespace}::{{{len(ops)} ops}}, the schemas its binary "
                         f"declares, no kernel; {answered} return empty tensors of their outputs' shapes, the ops "
                         f"that only write their arguments do nothing (the library does not load here: {why})")
    if stood_in:
        no_load_of(log, stood_in)

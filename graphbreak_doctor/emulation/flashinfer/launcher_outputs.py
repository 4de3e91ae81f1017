"""Tensors a FlashInfer MoE launcher allocates and returns, while emulated.

FlashInfer's fused-MoE launchers (``trtllm_fp4_block_scale_moe``,
``trtllm_fp8_block_scale_moe``, ``trtllm_bf16_moe`` and their siblings, in
its ``trtllm_fused_moe_kernel_launcher.cu``) return ``Array<Optional<Tensor>>``.
With ``do_finalize`` true the caller's ``output`` holds the result and
FlashInfer's Python reads nothing back. With ``do_finalize`` false (a
deferred finalize: the server sums the experts' rows itself, fused with its
shared expert or its all-reduce) the launcher returns tensors it allocated:

    [gemm2_output, expert_weights, expanded_idx_to_permuted_idx]

- ``gemm2_output``: bf16, ``[rows, hidden_size]``, where ``rows`` is the
  launcher's bound on permuted, padded tokens (``getMaxPermutedPaddedCount``
  at the routing tile, then at least 128 KiB worth: ``maybeGetMinTokenCount``);
- ``expert_weights``: none when the caller passed a non-empty buffer (the
  launcher borrowed it), else bf16 ``[num_tokens, top_k]``;
- ``expanded_idx_to_permuted_idx``: int32, ``[num_tokens * top_k]``,

``top_k`` counting fused shared experts. FlashInfer's Python turns each slot
into a torch tensor with ``torch.from_dlpack``. A dry kernel returns nothing,
so on the emulated GPU that read failed ("'NoneType' object is not
subscriptable") where a GPU server's capture goes on.

Here such an export answers with the tensors above as fake device tensors
(made by the emulation's memory mode, so they count as allocated), each
carried through tvm-ffi as an opaque Python object (``LauncherTensor``: a
fake tensor has no memory DLPack could export), and ``torch.from_dlpack``
hands the fake tensor back while the device is emulated. Which argument is
which comes from the export's C++ signature in the library's sources, so an
export that adds, drops or reorders parameters in another release is read as
that release declares it. The routing tile, when FlashInfer's Python leaves
it to the launcher (``config_index`` ``[-1, -1]``), is the launcher's default
choice: the smallest of its candidates around the average tokens per local
expert (``selectDefaultTileN``), over the tiles 8 to 128.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any, Callable, Optional

import torch

from graphbreak_doctor.patching import UndoLog

_SIGNATURE = re.compile(r"Array<Optional<Tensor>>\s+(\w+)\s*\(([^{;]*)\)\s*\{")
# The parameters a deferred finalize's tensors are sized from; a launcher
# export is answered only where its signature names them all.
_NEEDED = ("hidden_states", "top_k", "num_experts", "do_finalize")
_LOCAL_EXPERTS = ("local_num_experts", "num_local_experts")
_WEIGHTS = ("topk_weights", "expert_weights")
_TILES = (8, 16, 32, 64, 128)
_MIN_BYTES_BITS = 128 * 1024 * 8
_BF16_BITS = 16


@dataclasses.dataclass(frozen=True)
class LauncherTensor:
    """A launcher's output on the emulated device, as tvm-ffi carries it."""

    tensor: torch.Tensor


def _split_parameters(text: str) -> list[str]:
    depth, start, out = 0, 0, []
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [p.strip() for p in out if p.strip()]


def signatures(source_text: str) -> dict[str, tuple[str, ...]]:
    """Each ``Array<Optional<Tensor>>`` function's parameter names, by name."""
    found = {}
    for match in _SIGNATURE.finditer(source_text):
        names = tuple(re.sub(r"\s*=.*$", "", p).split()[-1].lstrip("&*") for p in _split_parameters(match[2]))
        found.setdefault(match[1], names)
    return found


def default_tile(num_tokens: int, top_k: int, local_experts: int) -> int:
    """The launcher's routing tile when none is asked for: the tile that
    covers the average tokens per local expert (or the largest), and the
    smallest of that and the one tile below it."""
    average = num_tokens * top_k / max(local_experts, 1)
    index = next((i for i, tile in enumerate(_TILES) if tile >= average), len(_TILES) - 1)
    return _TILES[max(index - 1, 0)]


def padded_rows(num_tokens: int, top_k: int, num_experts: int, tile: int, hidden_size: int) -> int:
    """``maybeGetMinTokenCount(getMaxPermutedPaddedCount(...))`` for a bf16 output."""
    remaining = num_tokens * top_k
    filled = min(num_experts, remaining)
    ctas = filled + (remaining - filled) // tile
    least = -(-_MIN_BYTES_BITS // (hidden_size * _BF16_BITS))
    return max(ctas * tile, least)


def _value(args: tuple, index: dict[str, int], *names: str) -> Any:
    for name in names:
        if name in index and index[name] < len(args):
            return args[index[name]]
    return None


def deferred_outputs(args: tuple, index: dict[str, int]) -> Optional[list]:
    """The tensors a launcher called with `args` returns, as LauncherTensors;
    None where FlashInfer's Python reads nothing back (``do_finalize``)."""
    if _value(args, index, "do_finalize") or _value(args, index, "query_workspace_size"):
        return None
    hidden = _value(args, index, "hidden_states")
    num_tokens, width = int(hidden.shape[0]), int(hidden.shape[-1])
    hidden_size = width * 2 if str(hidden.dtype) == "uint8" else width  # packed FP4: two values a byte
    shared = _value(args, index, "num_fused_shared_experts") or 0
    top_k = int(_value(args, index, "top_k")) + int(shared)
    num_experts = int(_value(args, index, "num_experts")) + int(shared)
    local = int(_value(args, index, *_LOCAL_EXPERTS) or num_experts) + int(shared)
    config = _value(args, index, "config_index")
    asked = int(list(config)[0]) if config is not None and len(config) else -1  # -1: the launcher chooses
    tile = asked if asked > 0 else default_tile(num_tokens, top_k, local)
    device = torch.device("cuda", hidden.device.index or 0)
    weights = _value(args, index, *_WEIGHTS)
    borrowed = weights is not None and hasattr(weights, "shape") and math.prod(int(d) for d in weights.shape) > 0
    rows = padded_rows(num_tokens, top_k, num_experts, tile, hidden_size)
    return [
        LauncherTensor(torch.empty((rows, hidden_size), dtype=torch.bfloat16, device=device)),
        None if borrowed else LauncherTensor(torch.empty((num_tokens, top_k), dtype=torch.bfloat16, device=device)),
        LauncherTensor(torch.empty((num_tokens * top_k,), dtype=torch.int32, device=device)),
    ]


@functools.cache
def _answer(parameters: tuple[str, ...]) -> Callable[..., Any]:
    index = {name: i for i, name in enumerate(parameters)}

    def launcher(*args: Any) -> Optional[list]:
        return deferred_outputs(args, index)

    return launcher


def answers_for(exports: tuple[str, ...], source_text: str) -> dict[str, Callable[..., Any]]:
    """An answer for each export that is a MoE launcher with a deferred
    finalize (its signature names every parameter the tensors are sized from)."""
    found = signatures(source_text) if "do_finalize" in source_text else {}
    out = {}
    for export in exports:
        parameters = found.get(export)
        if parameters and all(n in parameters for n in _NEEDED):
            out[export] = _answer(parameters)
    return out


def _from_dlpack(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def from_dlpack(ext_tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(ext_tensor, LauncherTensor):
            return ext_tensor.tensor
        return original(ext_tensor, *args, **kwargs)

    return from_dlpack


def install(log: UndoLog) -> None:
    """``torch.from_dlpack`` (and ``torch.utils.dlpack.from_dlpack``) hand a
    LauncherTensor's fake tensor back until `log` is undone; anything else
    goes to torch's own, with the rule Dynamo has for it."""
    from torch._dynamo import trace_rules
    import torch.utils.dlpack as dlpack

    original = dlpack.from_dlpack
    replacement = _from_dlpack(original)
    rules = trace_rules.get_torch_obj_rule_map()
    if original in rules:
        log.setitem(rules, replacement, rules[original])
    log.setattr(dlpack, "from_dlpack", replacement)
    if torch.from_dlpack is original:
        log.setattr(torch, "from_dlpack", replacement)

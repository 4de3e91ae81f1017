"""Shape functions (fakes) for library functions the doctor knows, and what
their registered ops accept.

A fake returns empty tensors of the shapes and dtypes the real function
returns; Dynamo needs nothing else to keep a custom op in the graph. Each
entry says which library source it was read from. Functions not listed here
get a fake inferred from a warm-up run under fake tensors (custom_op.py),
and a listed fake is cross-checked against that run when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch


def _round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def _flashinfer_pads_sf_columns() -> bool:
    """FlashInfer >= 0.7 reshapes swizzled scales to (-1, round_up(K/sf_vec, 4));
    0.6.x reshapes them to (-1, K/sf_vec) (fp4_quantization.py: fp4_quantize)."""
    import flashinfer
    from packaging.version import Version

    return Version(flashinfer.__version__.split("+")[0]) >= Version("0.7")


def fp4_quantize_fake(input: torch.Tensor, sf_vec_size: int = 16, is_sf_swizzled_layout: bool = True,
                      is_sf_8x4_layout: bool = False, **_ignored: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """flashinfer.fp4_quantize: (uint8 [..., K/2], uint8 block scales).

    Read from flashinfer 0.6.3 fp4_quantization.py (fp4_quantize,
    fp4_quantize_sm100, _compute_swizzled_layout_sf_size) and 0.7.4
    quantization/fp4_quantization.py (fp4_quantize, _fp4_quantize_fake):
    the kernel writes a flat scale buffer of round_up(M, 128 or 8) *
    round_up(K/sf_vec, 4) bytes when swizzled (M * K/sf_vec otherwise),
    which the wrapper reshapes to 2-D; a column-major input is transposed
    in and both outputs transposed back out."""
    column_major = input.stride(-2) == 1
    x = input.transpose(-2, -1) if column_major else input
    k = x.shape[-1]
    m = x.numel() // k
    x_q = x.new_empty((*x.shape[:-1], k // 2), dtype=torch.uint8)
    cols = k // sf_vec_size
    if is_sf_swizzled_layout:
        size = _round_up(m, 8 if is_sf_8x4_layout else 128) * _round_up(cols, 4)
        if _flashinfer_pads_sf_columns():
            cols = _round_up(cols, 4)
    else:
        size = m * cols
    if size % cols:
        # 0.6.x: the wrapper's sf.reshape((-1, K/sf_vec)) fails the same way.
        raise RuntimeError(f"shape '[-1, {cols}]' is invalid for input of size {size}")
    sf = x.new_empty((size // cols, cols), dtype=torch.uint8)
    if column_major:
        x_q, sf = x_q.transpose(-2, -1), sf.transpose(-2, -1)
    return x_q, sf


def mm_fp4_fake(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16,
                **_ignored: Any) -> torch.Tensor:
    """flashinfer.mm_fp4: [M, N] in out_dtype (gemm/gemm_base.py: mm_fp4
    allocates ``torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype)``)."""
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


@dataclass(frozen=True)
class KnownFunction:
    fake: Callable[..., Any]
    returns: str  # torch schema of the outputs
    # Parameters the custom op does not carry: they must keep their default
    # (or one of these values), else the call goes to the original function.
    fixed: dict[str, tuple] = field(default_factory=dict)
    source: str = ""


# Keyed by (top-level package, function name): the public API a caller uses.
CATALOGUE: dict[tuple[str, str], KnownFunction] = {
    ("flashinfer", "fp4_quantize"): KnownFunction(
        fp4_quantize_fake, "(Tensor, Tensor)",
        source="flashinfer fp4_quantization.py: fp4_quantize / fp4_quantize_sm100 (0.6.3), _fp4_quantize_fake (0.7.4)",
    ),
    ("flashinfer", "mm_fp4"): KnownFunction(
        mm_fp4_fake, "Tensor", fixed={"out": (None,)},
        source="flashinfer gemm/gemm_base.py: mm_fp4 (output allocation)",
    ),
}


# Wrapper parameters a registered op does not take, and the values for which
# the op's implementation behaves the same. flashinfer 0.7.4
# quantization/fp4_quantization.py: _fp4_quantize_custom_op calls
# fp4_quantize(...) without `backend` ("auto", which fp4_quantize maps to
# "cuda") and without is_global_scale_inversed (False).
REGISTERED_OP_EQUIVALENTS: dict[tuple[str, str], dict[str, tuple]] = {
    ("flashinfer", "fp4_quantize"): {"backend": ("auto", "cuda"), "is_global_scale_inversed": (False,)},
}


def known(package: str, function: str) -> KnownFunction | None:
    return CATALOGUE.get((package, function))

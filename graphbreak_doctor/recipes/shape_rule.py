"""A custom op's fake inferred from warm-up calls as a rule, not a table:
each output dimension is either one of the inputs' dimensions (the same
size in every call) or a constant, and each output is contiguous, with the
dtype every call gave it.

A function wrapped because of a data-dependent break may size its output
from its inputs' values (a length regulator repeats each frame as many times
as a duration tensor says): a dimension that is none of the inputs' is then
no constant, whatever the warm-up gave, but a size the fake leaves unknown
(``"unbacked"``: ``torch.library.get_ctx().new_dynamic_size()``, an unbacked
symbol the compiled graph reads from the op's result at run time). A
constant there would hold only for inputs whose values give that size.

A table of the shapes seen answers only those shapes; under a compile
that keeps a dimension symbolic (a server's dynamic token count) it
cannot answer at all. A rule answers any size the inputs come with. Where
a dimension matches an input's in every call and is also the same in every
call (one warm-up call, or an input that never changed), the input's
dimension wins: the outputs of a kernel follow its inputs far more often
than they happen to equal them.

The rule is plain literals (a written patch holds it as text): per output,
``("tensor", dims, dtype)`` with each dim an ``int`` or ``(parameter,
dimension)`` or ``"unbacked"``, and the dtype a name (``"bfloat16"``) or ``(parameter,)``:
where the function takes a dtype (an ``out_dtype``/``output_dtype``
argument) and every call's output had the dtype it was given, the fake reads
it from that argument -- a fake that wrote down the warm-up's bf16 would
answer bf16 to a server that asks for fp16 or fp32. Several outputs are
``("tuple", (...))``. ``make`` is pasted into written patches as it is."""

from __future__ import annotations

from typing import Any

Rule = Any
UNBACKED = "unbacked"


def infer(calls: list[tuple[dict, Any]], passed: list[str], data_sizes: bool = False) -> Rule | None:
    """The rule every call follows (``calls``: the op's arguments by name,
    and what the function returned), or None if there is none;
    ``data_sizes``: a dimension that is none of the inputs' is unbacked."""
    import torch

    if not calls:
        return None

    def one(outs: list[Any]) -> Rule | None:
        first = outs[0]
        if isinstance(first, tuple):
            if not all(isinstance(o, tuple) and len(o) == len(first) for o in outs):
                return None
            parts = [one([o[i] for o in outs]) for i in range(len(first))]
            return None if any(p is None for p in parts) else ("tuple", tuple(parts))
        if not all(isinstance(o, torch.Tensor) and o.dim() == first.dim() and o.is_contiguous() for o in outs):
            return None
        # An argument named for the output wins over another that happened
        # to hold the same dtype in every call.
        given = sorted((name for name in passed
                        if all(args.get(name) is o.dtype for (args, _), o in zip(calls, outs))),
                       key=lambda name: "out" not in name)
        if given:
            dtype: Any = (given[0],)
        elif all(o.dtype == first.dtype for o in outs):
            dtype = str(first.dtype).removeprefix("torch.")
        else:
            return None
        dims: list[Any] = []
        for d in range(first.dim()):
            sizes = [int(o.shape[d]) for o in outs]
            inputs = [(name, k) for name in passed
                      for k in range(_ndim(calls[0][0].get(name)))
                      if all(_size(args.get(name), k) == size for (args, _), size in zip(calls, sizes))]
            if inputs:
                dims.append(inputs[0])
            elif data_sizes:
                dims.append(UNBACKED)
            elif len(set(sizes)) == 1:
                dims.append(sizes[0])
            else:
                return None
        return ("tensor", tuple(dims), dtype)

    return one([out for _, out in calls])


def _ndim(value: Any) -> int:
    return value.dim() if hasattr(value, "dim") and hasattr(value, "shape") else 0


def _size(value: Any, dim: int) -> int | None:
    return int(value.shape[dim]) if _ndim(value) > dim else None


def make(rule: Any, args: dict) -> Any:
    """The outputs the rule gives for ``args`` (the op's arguments by name),
    on the first tensor argument's device."""
    import torch

    if rule[0] == "tuple":
        return tuple(make(r, args) for r in rule[1])
    _, dims, dtype = rule
    device = next((a.device for a in args.values() if isinstance(a, torch.Tensor)), torch.device("cpu"))
    shape = [args[d[0]].shape[d[1]] if isinstance(d, (tuple, list)) else
             torch.library.get_ctx().new_dynamic_size() if d == UNBACKED else d for d in dims]
    dtype = args[dtype[0]] if isinstance(dtype, (tuple, list)) else getattr(torch, dtype)
    return torch.empty(shape, dtype=dtype, device=device)


def unbacked(rule: Any) -> bool:
    """Does the rule leave a dimension to the values (``UNBACKED``)?"""
    if rule[0] == "tuple":
        return any(unbacked(r) for r in rule[1])
    return UNBACKED in rule[1]


def describe(rule: Any, passed: list[str]) -> str:
    """The rule as the expression a patch's fake returns."""
    if rule[0] == "tuple":
        return ", ".join(describe(r, passed) for r in rule[1])
    _, dims, dtype = rule
    shape = ", ".join(f"{d[0]}.shape[{d[1]}]" if isinstance(d, (tuple, list)) else
                      "torch.library.get_ctx().new_dynamic_size()" if d == UNBACKED else str(d) for d in dims)
    first = next((d[0] for d in dims if isinstance(d, (tuple, list))), passed[0] if passed else "x")
    dtype = dtype[0] if isinstance(dtype, (tuple, list)) else f"torch.{dtype}"
    return f"{first}.new_empty(({shape}{',' if len(dims) == 1 else ''}), dtype={dtype})"


__all__ = ["UNBACKED", "describe", "infer", "make", "unbacked"]

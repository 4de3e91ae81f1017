"""Fakes for the kernel-library ops whose outputs a schema cannot tell: one
entry per op, by its name in the library's namespace, with what its output
is. An op the framework registers a fake for never needs one here."""

from __future__ import annotations

from typing import Any, Callable

import torch


def _alias_of_input(tensor: torch.Tensor) -> torch.Tensor:
    # A view of the same memory, sizes and strides, that does not keep the
    # memory alive (the CUDA-graph runners' weak references).
    return tensor.new_empty_strided(tensor.size(), tensor.stride())


# name -> (the fake, what its output is in words)
FAKES: dict[str, tuple[Callable[..., Any], str]] = {
    "weak_ref_tensor": (_alias_of_input, "a tensor with the input's sizes and strides"),
}

"""What the built-in detectors make of what ran: a tensor's values read on
the host, and which way a copy goes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from graphbreak_doctor.cudagraph.detectors.detector import FUNCTION, OPERATOR, Operation, on_device

aten = torch.ops.aten
READ = aten._local_scalar_dense.default  # a tensor's value read on the host
_COPIES = {aten._to_copy.default, aten.copy_.default}


@dataclass(frozen=True)
class HostRead:
    device: bool  # the tensor read lives in device memory
    # The tensor method that read it ("tolist", "numpy"); "" for an operator's
    # read (.item(), int(), a branch on it).
    method: str = ""


def host_read(op: Operation) -> HostRead | None:
    """The tensor values ``op`` reads on the host; None when it reads none.
    ``.tolist()`` and ``.numpy()`` read memory without an operator: a
    function call shows them."""
    if op.kind == OPERATOR and op.func is READ:
        return HostRead(op.on_device)
    if op.kind == FUNCTION and op.func in (torch.Tensor.tolist, torch.Tensor.numpy) and op.args:
        return HostRead(on_device(op.args[0]), op.func.__name__)
    return None


@dataclass(frozen=True)
class Copy:
    src: Any
    to_host: bool  # device memory to host memory
    from_host: bool  # host memory to device memory
    non_blocking: bool


def direction(op: Operation) -> Copy | None:
    """Which way the copy ``op`` goes; None for an operator that copies nothing."""
    if op.func not in _COPIES:
        return None
    args, kwargs = op.args, op.kwargs
    if op.func is aten.copy_.default:
        dst, src = args[0], args[1]
        return Copy(src, to_host=on_device(src) and not on_device(dst), from_host=not on_device(src) and on_device(dst),
                    non_blocking=bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False)))
    src = args[0]
    target = kwargs.get("device")
    to_device = target is not None and torch.device(target).type != "cpu"
    return Copy(src, to_host=on_device(src) and target is not None and not to_device,
                from_host=not on_device(src) and to_device, non_blocking=bool(kwargs.get("non_blocking", False)))


__all__ = ["READ", "Copy", "HostRead", "direction", "host_read"]

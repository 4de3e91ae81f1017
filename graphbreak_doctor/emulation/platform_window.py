"""The platform window: while a serving framework is imported and builds its
modules on an emulated GPU, ``torch.cuda.is_available()`` answers True (its
import-time platform checks, every branch on them), and only then: Dynamo
must keep seeing False while it traces (docs/design.md, "Why
torch.cuda.is_available stays False"). Fake tensor mode reads the same
probe to decide whether a constant may be put on a real device; it keeps
its answer on this machine."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from graphbreak_doctor.patching import UndoLog


@contextlib.contextmanager
def platform_window() -> Iterator[None]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = torch.cuda.is_available
    # Fake tensor mode asks the same probes whether it may put a constant on a
    # real device (the property reads torch's device probes, not the mode);
    # it keeps the answer it gives on this machine.
    avoid = FakeTensorMode.__dict__["avoid_device_init"].fget(None)

    def is_available() -> bool:
        return True

    is_available.__qualname__, is_available.__module__ = real.__qualname__, real.__module__
    with UndoLog() as window:
        window.setattr(FakeTensorMode, "avoid_device_init", property(lambda self: avoid))
        window.setattr(torch.cuda, "is_available", is_available)
        yield
    _check_rule_map(is_available, real)


def _check_rule_map(replacement: Any, real: Any) -> None:
    """Dynamo's torch-object rule map is built from qualified names once per
    process; built while the replacement was installed it would hold the
    replacement instead of the real function (a false 'skipped' break)."""
    from torch._dynamo import trace_rules

    rules = trace_rules.get_torch_obj_rule_map()
    if replacement in rules:
        rules[real] = rules.pop(replacement)


__all__ = ["platform_window"]

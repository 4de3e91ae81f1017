"""A log of every change the emulation makes, undone in reverse order on exit."""

from __future__ import annotations

import os
from typing import Any, Callable

_MISSING = object()


class UndoLog:
    """Records attribute, dict-entry and environment changes; `undo()` reverts them.

    Changes are undone last-first, so nested emulations (each with its own log)
    and repeated patches of the same attribute restore the outermost original.
    """

    def __init__(self) -> None:
        self._steps: list[Callable[[], None]] = []
        self.patched: list[tuple[Any, str]] = []  # (owner, attribute), for tests

    def setattr(self, owner: Any, name: str, value: Any) -> None:
        # Only the owner's own entry counts: an inherited or absent attribute is
        # restored by deleting ours, not by pinning a copy on the owner.
        old = vars(owner).get(name, _MISSING)

        def restore() -> None:
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)

        setattr(owner, name, value)
        self._steps.append(restore)
        self.patched.append((owner, name))

    def setitem(self, mapping: Any, key: Any, value: Any) -> None:
        old = mapping.get(key, _MISSING)

        def restore() -> None:
            if old is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = old

        mapping[key] = value
        self._steps.append(restore)

    def setenv(self, name: str, value: str | None) -> None:
        old = os.environ.get(name)

        def restore() -> None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old

        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
        self._steps.append(restore)

    def call_on_undo(self, fn: Callable[[], None]) -> None:
        self._steps.append(fn)

    def undo(self) -> None:
        errors: list[BaseException] = []
        while self._steps:
            step = self._steps.pop()
            try:
                step()
            except BaseException as e:  # keep undoing; report the first failure
                errors.append(e)
        self.patched.clear()
        if errors:
            raise errors[0]

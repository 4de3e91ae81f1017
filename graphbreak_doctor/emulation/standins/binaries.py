"""What every stand-in is made of: the record of what was installed
(``StandIns``), whether a shared library loads here, an empty module in
place of one that does not, an op library fragment undone with the log, and
a kernel library whose functions are found but have no kernel
(``UnloadedLibrary``)."""

from __future__ import annotations

import ctypes
import importlib.util
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from graphbreak_doctor.patching import UndoLog


@dataclass
class StandIns:
    """What was installed, for the findings, and what ``register_missing_fakes`` still does."""

    lines: list[str] = field(default_factory=list)
    # The ops declared here ("namespace::name") that may still need a fake
    # after the framework's import.
    declared: list[str] = field(default_factory=list)
    libraries: dict[str, torch.library.Library] = field(default_factory=dict)

    def library(self, log: UndoLog, namespace: str) -> torch.library.Library:
        """The op library fragment of ``namespace`` the stand-ins define in
        (made on first use, destroyed when ``log`` is undone)."""
        if namespace not in self.libraries:
            self.libraries[namespace] = op_library(log, namespace)
        return self.libraries[namespace]


def loads(path: str) -> str:
    """'' if the shared library loads here, else the loader's first line."""
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        return str(e).splitlines()[0]
    return ""


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def declared(qualname: str) -> bool:
    """Whether the op ``namespace::name`` (or ``namespace::name.overload``)
    has a schema in this process."""
    name, _, overload = qualname.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(name, overload)
    except RuntimeError:
        return False
    return True


def op_library(log: UndoLog, namespace: str) -> torch.library.Library:
    """A fragment of the op library ``namespace``, destroyed when ``log`` is undone."""
    lib = torch.library.Library(namespace, "FRAGMENT")
    log.call_on_undo(lib._destroy)
    return lib


def empty_module(log: UndoLog, name: str, what: str) -> None:
    """An empty module importable as ``name``, standing in for ``what`` (a
    library that does not load here), until ``log`` is undone."""
    module = types.ModuleType(name)
    module.__file__ = f"<graphbreak-doctor stand-in for {what}>"
    log.setitem(sys.modules, name, module)


def no_load_of(log: UndoLog, paths: set[str]) -> None:
    """``torch.ops.load_library`` of a stood-in library (a package that loads
    its op library by path) does nothing until ``log`` is undone: its schemas
    are declared by the stand-in. ``paths`` are resolved paths."""
    real = torch.ops.load_library

    def load_library(path: str) -> None:
        if str(Path(path).resolve()) in paths:
            return
        real(path)

    log.setattr(torch.ops, "load_library", load_library)


def no_op(*args, **kwargs) -> None:
    return None


def sm_count() -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


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

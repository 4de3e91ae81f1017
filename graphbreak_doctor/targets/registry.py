"""The target providers the command line offers, in the order its help lists them.

A new kind of traced code is a module defining a ``TargetProvider`` (see
provider.py) plus one line here, or an installed package's entry point in
``graphbreak_doctor.providers`` (graphbreak_doctor/plugins.py).
"""

from __future__ import annotations

import functools
from typing import Any

from graphbreak_doctor import plugins
from graphbreak_doctor.targets import factory
from graphbreak_doctor.targets import serving
from graphbreak_doctor.targets.provider import TargetProvider

_BUILT_IN: tuple[TargetProvider, ...] = (
    factory.PROVIDER,
    serving.PROVIDER,
)


@functools.cache
def providers() -> tuple[TargetProvider, ...]:
    """The built-in providers, then the plugins' (read on first use, once
    every module has been imported). Also the module's ``PROVIDERS``."""
    return _BUILT_IN + plugins.load("providers", TargetProvider, {p.name for p in _BUILT_IN})


def __getattr__(name: str) -> Any:
    if name == "PROVIDERS":
        return providers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def provider(name: str) -> TargetProvider:
    for p in providers():
        if p.name == name:
            return p
    raise KeyError(f"unknown target provider {name!r} (known: {', '.join(p.name for p in providers())})")

"""The target providers the command line offers, in the order its help lists them.

A new kind of traced code is a module defining a ``TargetProvider`` (see
provider.py) plus one line here.
"""

from __future__ import annotations

from graphbreak_doctor.targets import factory
from graphbreak_doctor.targets.glm5 import provider as glm5
from graphbreak_doctor.targets.provider import TargetProvider

PROVIDERS: tuple[TargetProvider, ...] = (
    factory.PROVIDER,
    glm5.PROVIDER,
)


def provider(name: str) -> TargetProvider:
    for p in PROVIDERS:
        if p.name == name:
            return p
    raise KeyError(f"unknown target provider {name!r} (known: {', '.join(p.name for p in PROVIDERS)})")

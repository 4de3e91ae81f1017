"""A framework's environment, as the matrix builds one per release: the
requirement files it installs (a base file with its dependencies, then a
file without), what it follows of the release's own pins once the release
is installed, and the words that key it. Each framework owns its recipe
(``Framework.environment``); the matrix (matrix/envs.py) runs it with uv.

Here too: the helpers the recipes share (a requirement list's exact pins,
a pin replaced, the version of a package's time). Nothing here runs a
process: what a recipe installs or reads, it asks its ``Installer``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The base file every environment without a framework of its own starts from
# (the doctor's own pinned dependencies; package data of the matrix).
BASE = "ci.txt"


@dataclass(frozen=True)
class Installer:
    """What a recipe may do to the environment being built: ``install(*args,
    what=...)`` (uv's install, torch held), ``uninstall(*names, what=...)``,
    and ``requires(*distributions)``: each installed distribution's
    requirement lines, then {name: version} of everything installed."""

    python: str
    install: Callable[..., None]
    uninstall: Callable[..., None]
    requires: Callable[..., list[Any]]


@dataclass(frozen=True)
class Recipe:
    """One release's environment: file name -> text (``base.txt`` installed
    with its dependencies, ``nodeps.txt`` without), and what keys it beside
    the files (the version of the rules that follow the release's pins)."""

    files: dict[str, str]
    rules: tuple = ()


def hold_torch(lines: list[str], torch: str) -> list[str]:
    """The lines' torch pin, where there is one, at ``torch`` ("": as they are)."""
    if not torch:
        return lines
    return [f"torch=={torch}" if re.match(r"\s*torch\s*==", line) else line for line in lines]


def base_recipe(read: Callable[[str], list[str]], flashinfer: str, torch: str, name: str = BASE) -> list[str]:
    """The lines of a base file (package data, read by ``read``) with the cell's FlashInfer and torch."""
    return hold_torch(pin(read(name), "flashinfer-python", flashinfer), torch)


class EnvError(Exception):
    """An environment could not be built: one line why."""


def norm_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def version_key(text: str):
    from packaging.version import Version

    return Version(text)


def of_its_time(name: str, release: list[str], flashinfer: list[str]) -> tuple[str, str, str] | None:
    """(version, "[extras]", conflict) of ``name`` as FOLLOW_TIME chooses it
    from the release's and the FlashInfer's requirement lines (``conflict``:
    why it is not the release's own, "" where it is); None where neither names it."""
    from packaging.requirements import InvalidRequirement, Requirement

    def wanted(lines: list[str]) -> tuple[str, str, Any] | None:
        for line in lines:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if norm_name(requirement.name) != norm_name(name) or (requirement.marker and "extra" in str(requirement.marker)):
                continue
            pins = [s.version for s in requirement.specifier if s.operator == "=="]
            floors = sorted((s.version for s in requirement.specifier if s.operator == ">="), key=version_key)
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            version = pins[0] if pins else floors[-1] if floors else ""
            return (version, extras, requirement.specifier) if version else None
        return None

    mine, theirs = wanted(release), wanted(flashinfer)
    if mine and (theirs is None or theirs[2].contains(mine[0], prereleases=True)):
        return mine[0], mine[1], ""
    if theirs is None:
        return None
    conflict = (f"the release asks {name}{mine[2]} ({mine[0]} of its time), the FlashInfer {name}{theirs[2]}: "
                "the FlashInfer's is installed" if mine else "")
    return theirs[0], (mine[1] if mine else "") or theirs[1], conflict


def pin(lines: list[str], package: str, version: str) -> list[str]:
    """``lines`` with the requirement of ``package`` replaced by ==version."""
    out, found = [], False
    for line in lines:
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
        if name and norm_name(name.group(1)) == norm_name(package):
            out.append(f"{package}=={version}")
            found = True
        else:
            out.append(line)
    if not found:
        out.append(f"{package}=={version}")
    return out


def exact_pins(requirements: list[str]) -> dict[str, str]:
    """name -> version of the ``name==version`` requirements (not an extra's)."""
    pins = {}
    for requirement in requirements:
        text, _, marker = requirement.split("#", 1)[0].partition(";")
        if "extra" in marker:
            continue
        m = re.match(r"\s*([A-Za-z0-9._-]+)\s*==\s*([A-Za-z0-9.+!-]+)\s*$", text)
        if m:
            pins[norm_name(m.group(1))] = m.group(2)
    return pins

"""The serving frameworks the doctor knows: the built-in ones, found by
walking this package (each subpackage's ``framework.py`` holds
``FRAMEWORK``), then the ones installed packages register in the
``graphbreak_doctor.frameworks`` entry-point group (plugins.py).

Callers ask for the framework of a selection (``of``) or of a launch
(``of_launch``), or by the name a user typed (``get``); nobody compares a
framework's name. Importing this module imports no framework's own package
beyond its ``framework.py`` and ``__init__.py`` (neither imports torch)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Mapping

from graphbreak_doctor import plugins
from graphbreak_doctor.targets.frameworks.framework import Framework
from graphbreak_doctor.targets.provider import Option
from graphbreak_doctor.text import one_line

PACKAGE = "graphbreak_doctor.targets.frameworks"


def _builtins() -> tuple[Framework, ...]:
    """Every subpackage's ``framework.FRAMEWORK``, by package name."""
    package = importlib.import_module(PACKAGE)
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{PACKAGE}.{info.name}.framework")
        framework = getattr(module, "FRAMEWORK", None)
        if not isinstance(framework, Framework):
            raise TypeError(f"{module.__name__}.FRAMEWORK is not a Framework")
        found.append(framework)
    return tuple(found)


def _refuse(framework: Framework) -> str:
    """Why a plugin's framework cannot be taken ("" when it can): its name
    is not one word, or its launch option cannot be made (the command line
    offers it with every command: one that cannot be made would stop them all)."""
    if not framework.name or not framework.name.replace("-", "").isalnum() or framework.name != framework.name.lower():
        return f"a framework's name is one lower-case word, not {framework.name!r}"
    try:
        option = framework.launch_option()
    except Exception as e:  # the plugin's own code: left out, said in one line
        return f"its launch_option() raised {type(e).__name__}: {one_line(str(e), 200)}"
    if not isinstance(option, Option) or option.flag != framework.option:
        return f"its launch_option() is not an Option named {framework.option}"
    return ""


BUILTIN = _builtins()
FRAMEWORKS: tuple[Framework, ...] = BUILTIN + plugins.load("frameworks", Framework, {f.name for f in BUILTIN},
                                                           refuse=_refuse)
_BY_NAME = {f.name: f for f in FRAMEWORKS}


def get(name: str) -> Framework:
    """The framework a user names; a ValueError (one line) naming the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"no serving framework {name!r} (known: {', '.join(_BY_NAME)})") from None


def of(options: Mapping[str, Any]) -> Framework | None:
    """The framework that builds a selection (its options' ``framework``);
    None for code no framework builds."""
    name = options.get("framework")
    return _BY_NAME.get(name) if isinstance(name, str) else None


def of_launch(launch: Mapping[str, Any]) -> Framework | None:
    """The framework whose resolved launch a target's ``launch`` facts hold:
    its ``framework`` key; a launch without one comes from a framework that
    does not name itself there (the older facts), the first built-in one
    that never did."""
    name = launch.get("framework")
    if isinstance(name, str):
        return _BY_NAME.get(name)
    return next((f for f in BUILTIN if not f.names_its_launch), None) if launch else None


def releases() -> dict[str, str]:
    """Each framework's installed release, as findings record it: a
    framework is named where it is installed, and one that older findings
    always named is named with "" where it is not."""
    found = {}
    for framework in FRAMEWORKS:
        release = framework.release()
        if release or framework.always_recorded:
            found[framework.name] = release
    return found


def install_stand_ins(log: Any) -> Any:
    """The stand-ins this machine needs before a framework is imported
    (emulation/standins/): the shared libraries' and every framework's own
    (``Framework.install_stand_ins``), through the undo log ``log``; the
    StandIns installed."""
    from graphbreak_doctor.emulation import standins

    return standins.install(log, [f.install_stand_ins for f in FRAMEWORKS])


def given(options: Mapping[str, Any]) -> list[Framework]:
    """The frameworks whose launch arguments (``--<name>-args``) the options give."""
    return [f for f in FRAMEWORKS if options.get(f.option_name) is not None]


__all__ = ["BUILTIN", "FRAMEWORKS", "get", "given", "install_stand_ins", "of", "of_launch", "releases"]

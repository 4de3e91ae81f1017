"""What a serving framework is to the doctor: one interface, one subclass per
framework.

A framework owns what only it knows: its name and distribution, whether it
is installed, the phases its server runs, its launch arguments (the
``--<name>-args`` option, split and read by its own grammar), the sizes its
resolved launch compiles and captures at, building the served model through
its own code, and how its launch facts are said to the user. The rest of the
doctor asks the framework of a selection or of a launch
(``registry.py``); it never compares a framework's name.

A built-in framework is a package here whose ``framework.py`` holds
``FRAMEWORK`` (found by walking this package: there is no list to edit); a
plugin registers one in the ``graphbreak_doctor.frameworks`` entry-point
group (plugins.py). This module imports no framework and no torch: the
command line reads it before any worker starts.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Mapping

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target
from graphbreak_doctor.targets.frameworks.environment import Installer, Recipe, base_recipe, pin
from graphbreak_doctor.targets.provider import Option, pick_sizes


@dataclass(frozen=True)
class Served:
    """What the caller (a target provider) knows of the served model before
    the framework reads it: its config folder (the framework's model path),
    how the findings name it, and for one layer its index and the layers that
    run the same code. Plain data: a framework reads no model package."""

    config_dir: str
    name: str  # e.g. "GLM-5 (GlmMoeDsaForCausalLM)"
    spec: str  # the spec's first word, e.g. "glm5-sglang"
    provider: str
    index: int | None = None  # the traced layer (scopes "block" and "layer")
    same: tuple[int, ...] = ()  # the layers that run the traced layer's code
    facts: dict[str, Any] = field(default_factory=dict)  # what the provider read (config path, quant profile)
    shapes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Build:
    """What to build, beside the served model: the layer kind (``dense``,
    ``moe``, ``model``), the batch, the scope (``block``, ``layer``,
    ``model``), the phase and the launch arguments."""

    kind: str = "model"
    tokens: int | None = None
    cold: bool = False
    scope: str = "model"
    phase: str = ""
    launch: tuple[str, ...] = ()


class Framework:
    """One serving framework. Subclasses set the class attributes and
    implement the methods that raise NotImplementedError."""

    name: str = ""  # one word: its --<name>-args option, its matrix axis, its findings' environment key
    title: str = ""  # how the user's texts name it ("SGLang")
    distribution: str = ""  # the installed distribution whose version is its release
    module: str = ""  # the top-level module that is there when it is installed
    phases: tuple[str, ...] = ()  # the phases its server runs, in order
    # The scopes it builds: "model" (the served model's forward), "layer"
    # (one decoder layer), "block" (a layer's MLP block).
    scopes: tuple[str, ...] = ("model",)
    docs: str = ""  # the project's page on it (docs/...), named in its errors
    # Whether every findings' environment names it, installed or not ("" then):
    # the older findings did, and their readers expect the key.
    always_recorded: bool = False
    # Whether its launch facts have always carried ``framework`` (its name):
    # launch facts without one, written before every framework named itself
    # there, are the one built-in framework's that did not.
    names_its_launch: bool = True
    # Whether each release pins the torch it runs, so that the matrix's
    # ``--torch release`` holds each release's cells at it (read from its wheel).
    torch_release: bool = False

    @property
    def option(self) -> str:
        """The launch arguments' option: ``--sglang-args``."""
        return f"--{self.name}-args"

    @property
    def option_name(self) -> str:
        """The option's name among the parsed options: ``sglang_args``."""
        return f"{self.name}_args".replace("-", "_")

    def available(self) -> bool:
        """Whether it is installed here (it is imported only inside the device)."""
        return importlib.util.find_spec(self.module or self.name) is not None

    def release(self) -> str:
        """The installed release ("" where it is not installed)."""
        try:
            return importlib.metadata.version(self.distribution or self.name)
        except importlib.metadata.PackageNotFoundError:
            return ""

    def launch_option(self) -> Option:
        """The ``--<name>-args`` option, as data (targets/provider.py)."""
        raise NotImplementedError

    def split_launch(self, text: str, config: str | None) -> tuple[tuple[str, ...], str | None]:
        """The launch arguments split by the framework's grammar, and the
        config folder: the model they name (if any) is the model's config,
        and ``config`` must then be None (a ValueError, one line, otherwise)."""
        raise NotImplementedError

    def server_sizes(self, launch: Mapping[str, Any], phase: str) -> tuple[list[int], str]:
        """What the resolved launch (the target's ``launch`` facts) compiles
        ``phase`` at, and a line saying where the sizes come from; ([], "")
        where it compiles nothing at known sizes."""
        raise NotImplementedError

    def sizes_to_prove(self, sizes: list[int]) -> list[int]:
        """Which of the server's sizes a fix is proved at."""
        return pick_sizes(sizes)

    def build(self, served: Served, what: Build, *, device: str, log: UndoLog) -> Target:
        """The served model (or one of its layers) as the framework builds
        it, inside the selected device."""
        raise NotImplementedError

    def compiles_prefill_apart(self, launch: Mapping[str, Any]) -> bool:
        """Whether the resolved launch compiles the prefill forward on a path
        of its own that its compile map does not trace (the matrix then
        traces it as that path compiles it)."""
        return False

    def environment(self, release: str, flashinfer: str, torch: str,
                    read: Callable[[str], list[str]]) -> Recipe:
        """The requirement files of a matrix environment holding ``release``
        with the cell's FlashInfer and torch ("": the one the matrix runs):
        by default the doctor's own base file (``read(name)``: the lines of
        a requirement file of the matrix's package data) with the release's
        distribution pinned, installed with its dependencies, torch held."""
        lines = pin(base_recipe(read, flashinfer, torch), self.distribution or self.name, release)
        return Recipe({"base.txt": "\n".join(lines) + "\n"})

    def follow_release(self, release: str, files: Mapping[str, str],
                       env: Installer) -> tuple[dict[str, str], list[str]]:
        """Once ``release`` is installed in the environment (``files`` as
        ``environment`` gave them): what of its own pins the environment
        follows (name -> version, installed through ``env``), and a note for
        each pin it cannot hold as the release asks. By default: nothing."""
        return {}, []

    def install_stand_ins(self, log: UndoLog, out: Any) -> None:
        """Stand in (emulation/standins/) for the framework's own native
        libraries that cannot load here, through ``log``, adding each to
        ``out`` (a StandIns). By default: none."""

    def said_lines(self, launch: Mapping[str, Any]) -> list[str]:
        """What the framework logged (and the rules of its code that changed
        a compile field) while it resolved the launch, as the user reads it."""
        said = launch.get("said")
        return [f"{self.title} said: {text}" for text in (said if isinstance(said, list) else ())]


__all__ = ["Build", "Framework", "Served"]

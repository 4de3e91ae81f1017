"""The record a kind of traced code is: its options, and how it selects and
builds targets.

A provider declares its command-line options as data (:class:`Option`; the
CLI turns them into arguments). Giving one of its *selecting* options
(``--target``, ``--layer``) chooses the provider; its other options
(``--tokens``) are a usage error with any other provider. ``select`` turns
the options into :class:`Selection` records -- plain, picklable data -- and
``build`` makes each a :class:`Target`, inside the selected device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target


def pick_sizes(sizes: list[int]) -> list[int]:
    """The smallest, a middle and the largest of a server's sizes (each once)."""
    if not sizes:
        return []
    ordered = sorted(set(sizes))
    chosen = [ordered[0], ordered[len(ordered) // 2], ordered[-1]]
    return list(dict.fromkeys(chosen))


def size_label(size: int | tuple[int, ...]) -> str:
    """A size as the user gives it (``--sizes``): 64, or a shape 4x4x2."""
    return "x".join(map(str, size)) if isinstance(size, tuple) else str(size)


def parse_size(text: str) -> int | tuple[int, ...]:
    """One ``--sizes`` item: an integer >= 1, or a shape of them (4x4x2);
    ValueError otherwise."""
    parts = text.strip().lower().split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if not dims or min(dims) < 1:
        raise ValueError(f"{text.strip()!r} is not a size (an integer >= 1, or a shape such as 4x4x2)")
    return dims[0] if len(dims) == 1 else dims


@dataclass(frozen=True)
class Option:
    flag: str
    # What --help says; a function where the text lists what is installed
    # (the packaged models), called when the command line's parser is built.
    help: str | Callable[[], str]
    dest: str = ""
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    # Parses the text (an integer at least 1, ...); raises ValueError with a reason.
    type: Callable[[str], Any] | None = None
    # Giving this option selects the provider.
    selects: bool = False
    # Takes no value: given, it is True; not given, None (like any option left out).
    switch: bool = False
    # May be given more than once: its value is the list of what was given.
    repeat: bool = False
    # Its value is a command line of its own, which may start with "-"
    # (``--sglang-args --enable-torch-compile``): the next word is its value.
    command_line: bool = False

    @property
    def name(self) -> str:
        return self.dest or self.flag.lstrip("-").replace("-", "_")

    @property
    def help_text(self) -> str:
        return self.help() if callable(self.help) else self.help


@dataclass(frozen=True)
class Selection:
    """One target to build: which provider, a name for its output files, and
    the options it needs (plain values only)."""

    provider: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    # The spec the built target will carry (TargetInfo.spec): names the target
    # in baselines and reports even when it never got built.
    spec: str = ""


class TargetProvider:
    """Subclass and register in targets/registry.py."""

    name: str = ""
    # Help-group title and the usage hint naming the selecting options.
    title: str = ""
    options: tuple[Option, ...] = ()
    # `matrix` offers the provider's options: each selection is traced in
    # every cell's environment (its code must import there).
    in_matrix: bool = False
    # ``at_size`` takes shapes (tuples) as well as whole numbers (--sizes 4x4x2).
    shaped_sizes: bool = False

    def select(self, options: Mapping[str, Any]) -> list[Selection]:
        """The targets these options ask for; ValueError (one line) if they are wrong."""
        raise NotImplementedError

    def build(self, selection: Selection, device: str, log: UndoLog) -> Target:
        """Build one selected target; called inside the device. Process-global
        changes it needs for the whole diagnosis go through ``log``. Raises
        TargetError (one line) for bad input."""
        raise NotImplementedError

    def at_size(self, selection: Selection, size: int) -> Selection | None:
        """The same target at another size (tokens in the batch, a factory's
        ``size``); None: this provider's targets have no size to change."""
        return None

    def builds_again_in_process(self, selection: Selection) -> bool:
        """Whether a second build of the target (at another size) may happen
        in the process that built it first, without changing the first (the
        fix ladder's warm-ups at the server's sizes)."""
        return True

    def server_sizes(self, selection: Selection, info: Any) -> tuple[list[int], str]:
        """The sizes a server compiles this target at, read from what its build
        recorded (``info``, a TargetInfo), and where they come from in words;
        ([], "") when none are known."""
        return [], ""

    def sizes_to_prove(self, selection: Selection, sizes: list[int]) -> list[int]:
        """Which of the server's sizes (``server_sizes``) a written patch is
        proven at: the smallest, a middle and the largest."""
        return pick_sizes(sizes)

    def cell_label(self, selection: Selection) -> str:
        """What a matrix cell of ``selection`` is called (its row)."""
        return selection.spec or selection.name

    def selecting_flags(self) -> tuple[str, ...]:
        return tuple(o.flag for o in self.options if o.selects)

    def selected(self, options: Mapping[str, Any]) -> bool:
        return any(options.get(o.name) is not None for o in self.options if o.selects)

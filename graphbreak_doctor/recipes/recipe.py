"""The record every fix recipe is: the advice a person reads, and (where the
doctor can) the same change made in-process so the fix ladder can prove it.

A break's category names the recipe whose advice the report shows and the
recipes the ladder tries (graphbreak_doctor.analysis.categories); both speak
of recipes by the names defined here, so the report and the ladder use one
vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from graphbreak_doctor.model import Break
from graphbreak_doctor.patching import PatchSet


@dataclass(frozen=True)
class Names:
    """The break as advice sees it: the names and source lines an example is
    built from (analysis/fixes.py fills it from a Break)."""

    # The callable or object Dynamo refused ("_thread.RLock"), and the call the
    # frame to change made that led there ("subprocess.check_output").
    culprit: str = ""
    entry: str = ""
    # The function to change, and "file:line (qualname)" of the line to change.
    function: str = ""
    where: str = ""
    # That line, as in the source (indentation kept), and the line Dynamo
    # stopped at.
    line: str = ""
    site_line: str = ""
    # The frame that called the function to change: its location and line
    # ("" when the function is the traced one).
    caller: str = ""
    caller_where: str = ""
    caller_line: str = ""
    # Why the category breaks ("the stack runs a child process").
    why: str = ""
    # Registered ops ({package}, {op}).
    package: str = ""
    op: str = ""


@dataclass(frozen=True)
class Advice:
    """Text templates; ``{call}`` is the call to change, ``{function}`` the
    function to change it in (``{package}`` / ``{op}`` for registered ops,
    ``{where}`` its location, ``{why}`` the category's reason). ``example``
    builds the snippet from the break's own lines; ``snippet`` is the generic
    form (SARIF rule help, or when the lines are not known)."""

    summary: str
    detail: str
    snippet: str
    # What {call} reads as when the call has no name.
    unnamed_call: str = "the call"
    # Which call {call} names: "culprit" (the callable Dynamo refused: a lock,
    # SimpleNamespace, a tvm-ffi kernel) or "entry" (the library call the code
    # made that led there: subprocess.check_output, pathlib.Path.stat).
    names: str = "culprit"
    # The example for one break, from its names; "" when it cannot be built.
    example: Callable[[Names], str] | None = None

    def fields(self, names: Names) -> dict[str, str]:
        """What the templates are formatted with."""
        call = (names.entry or names.culprit) if self.names == "entry" else (names.culprit or names.entry)
        function = names.function if names.function.isidentifier() else "fn"
        return {**vars(names), "call": f"`{call}`" if call else self.unnamed_call, "function": function}


class NotApplicable(Exception):
    """This recipe does not fit this break; the message says why."""


@dataclass
class Change:
    """A change the ladder makes, as data a standalone patch can make again
    (graphbreak_doctor.fix.emit writes it as source): the module global
    ``module.function`` is replaced at the end of ``module``'s import.

    ``kind``: ``memo`` (the function answers the calls in ``keys`` from a
    warm-up made before capture; ``precomputed``: how to know the answer to
    a call without arguments without making it, hoist.Precomputed),
    ``custom_op`` (the function becomes the opaque op ``op`` with ``schema``;
    its fake is the catalogue's ``fake``, the shape ``rule`` or the shapes in
    ``table``) or
    ``registered_op`` (under torch.compile, calls go to the library's own op
    ``op``, "package.name"). ``passed``: the parameters the op takes; every
    other one keeps its default or a value in ``accepted``."""

    kind: str
    module: str
    function: str
    file: str
    original: Any = None
    keys: list = field(default_factory=list)
    precomputed: Any = None
    op: str = ""
    schema: str = ""
    passed: list[str] = field(default_factory=list)
    accepted: dict = field(default_factory=dict)
    fake: Callable | None = None
    table: dict | None = None
    rule: Any = None  # an inferred fake as a shape rule (recipes/shape_rule.py), where one fits
    # For which inputs the change holds, in words; and whether it holds at
    # every size the server uses (None: not known, no sizes were given).
    holds: str = ""
    every_size: bool | None = None
    # A memo of a class's method: the class (a global of ``module``) and the
    # method's kind (classmethod, staticmethod); ``function`` is its name.
    owner: str = ""
    member: str = ""
    # ``config``: the statements that set the option in torch._dynamo.config
    # (run in that module, which they name ``_config``); ``function`` is the option.
    settings: list[str] = field(default_factory=list)
    # ``rewrite``: the function's new source, a ``def`` of ``function``
    # (recipes/rewrite.py), defined in ``module`` in its place.
    source: str = ""


@dataclass
class Plan:
    """One recipe fitted to one break: the change a person would make, and
    ``apply``, which makes the equivalent change in this process."""

    recipe: str
    culprit: str  # "module.function" the change is about
    where: str  # "file:function" of the code to change
    patch: str  # the change a user would make
    apply: Callable[[PatchSet], str]  # makes it in-process; returns a detail line
    # Demonstrations only: explains, after the re-trace, why the change is
    # rejected (called with the re-trace's result and its first break).
    judge: Callable[[Any, Break | None], str] | None = None
    # The same change as data, for a written patch; None: the doctor cannot
    # write it as a patch (a demonstration, a change only a person can make).
    change: Change | None = None


@dataclass
class FixContext:
    """What recipes need from the ladder."""

    warm_up: Callable[[], None]  # runs the target once, eagerly
    # Traces the (patched) target in a mode: (mode result, its first break).
    trace: Callable[[str], tuple[Any, Break | None]]
    # The sizes the server compiles the target at ([]: unknown), and running
    # the target once, eagerly, at one of them (built at that size on first use).
    sizes: list[int] = field(default_factory=list)
    warm_up_at: Callable[[int], None] | None = None
    trap_done: str = ""  # detail of the demonstrated trap, once tried
    wrapped: set[str] = field(default_factory=set)  # "module.function" already made custom ops


Planner = Callable[[Break, FixContext], Plan]


@dataclass(frozen=True)
class Recipe:
    name: str
    advice: Advice
    # Fits the recipe to a break for the fix ladder; None: advice only, a
    # person has to make this change (torch.cond, a logging guard).
    plan: Planner | None = None
    # Tried only to show that it does not work under fullgraph: the ladder
    # always undoes it and records it as rejected, with the plan's judge text.
    demonstration: bool = False

"""The record every break category is: what it means, how to recognise it,
what to advise, and which recipes the fix ladder tries."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """Evidence that a break belongs to a category; any field that matches is enough."""

    # Dynamo's registry ids of the break (torch/_dynamo/graph_break_registry.json).
    gb_ids: frozenset[str] = frozenset()
    # Dynamo's exception types on the failure's chain, qualified
    # ("torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode"), or
    # a UserError's type ("torch._dynamo.exc.UserErrorType.DYNAMIC_CONTROL_FLOW"):
    # capture failures that are not Unsupported have no registry id.
    exceptions: tuple[str, ...] = ()
    # Stdlib modules the stack passes through ("subprocess", "pathlib", ...).
    through: tuple[str, ...] = ()
    # Prefixes of the refused callable, as "module.qualname".
    culprits: tuple[str, ...] = ()
    # The refused callable is compiled code owned by a non-stdlib package.
    extension_culprit: bool = False
    # The refused callable is a builtin or stdlib C function / type.
    stdlib_culprit: bool = False
    # The recipe whose text is the suggested fix for breaks this rule
    # recognises, when it differs from the category's (a lock entered as a
    # context manager needs other advice than a SimpleNamespace).
    advice: str = ""


@dataclass(frozen=True)
class Category:
    name: str
    # Why a break lands here, in one line (SARIF rule text, the report).
    why: str
    # Evidence, as the README's category table puts it.
    evidence: str
    rules: tuple[Rule, ...]
    # The recipe (graphbreak_doctor.recipes) whose text is the suggested fix.
    advice: str
    # Recipes the fix ladder tries for a break of this category, first applicable first.
    ladder: tuple[str, ...]
    # Categories are tried in ascending priority; the first whose rules match wins.
    priority: int

"""Which kind of break is this? Each category's rules (analysis/categories/),
tried in priority order; the first category with a matching rule wins.

What a break looks like is not what it is (docs/design.md, "What a break
looks like is not what it is"):
``subprocess.check_output`` surfaces as a skipped ``_thread.allocate_lock``
inside ``subprocess.py``, ``Path.exists()`` as a skipped ``posix.stat``. So
the rules look at Dynamo's registry id, the exception types, the stack the
break was reached through and the callable Dynamo refused (the culprit, read
from Dynamo's own objects by capture; :func:`culprit_of` reads it from the
message text only when they did not say, and the findings count that).
"""

from __future__ import annotations

import _thread
import builtins
import re
import sys

from collections.abc import Sequence

from graphbreak_doctor.analysis import categories
from graphbreak_doctor.analysis.categories import Category, Rule
from graphbreak_doctor.model import Frame
from graphbreak_doctor.frames import stdlib_module

# Registry ids of the calls Dynamo refuses to trace: function marked as
# skipped (GB0007), unsupported function / method call (GB0147, GB0156),
# builtin operator (GB0059), context manager (GB0142), inlining a skipped
# function (GB0008).
_REFUSED_CALL = frozenset({"GB0007", "GB0147", "GB0156", "GB0059", "GB0142", "GB0008"})


_CULPRIT_PATTERNS = (
    re.compile(r"module: (?P<module>[\w.]+), qualname: (?P<qualname>[\w.<>]+)"),
    re.compile(r"trace the builtin `(?P<name>[^`]+?)\.?`"),
    re.compile(r"trace the function `<class '(?P<name>[^']+)'>`"),
    re.compile(r"trace the function `(?P<name>[^`]+)`"),
    re.compile(r"trace method `(?P<method>[^`]+)` of class `(?P<cls>[^`]+)`"),
    re.compile(r"builtin operator `(?P<name>[^`]+)`"),
    re.compile(r"function `<function (?P<name>[\w.<>]+)>`"),
    re.compile(r"enter a `(?P<name>\w+)` context manager"),
    re.compile(r"method: <(?P<cls>Logger) [^>]*>\.(?P<method>\w+)"),
    re.compile(r"UserDefinedClassVariable\(<class '(?P<name>[^']+)'>\)"),
    re.compile(r"BuiltinVariable\((?P<name>\w+)\)"),
)


# Classes of the standard library's C modules that Dynamo's messages name
# without their module ("method `acquire` of class `lock`"): the name the
# capture reads from Dynamo's own objects for the same break.
_BARE_STDLIB_CLASSES = {t.__name__: f"{t.__module__}.{t.__qualname__}" for t in (_thread.LockType, _thread.RLock)}


def culprit_of(explanation: str, context: str) -> str:
    """The callable Dynamo refused, as 'module.qualname' where it can tell."""
    for text in (context, explanation):
        for pattern in _CULPRIT_PATTERNS:
            m = pattern.search(text)
            if not m:
                continue
            groups = m.groupdict()
            if groups.get("module"):
                return f"{groups['module']}.{groups['qualname']}"
            if groups.get("method"):
                cls = "logging.Logger" if groups["cls"] == "Logger" else groups["cls"]
                cls = _BARE_STDLIB_CLASSES.get(cls, cls)
                return f"{cls}.{groups['method']}"
            name = groups["name"]
            return f"builtins.{name}" if "." not in name and hasattr(builtins, name) else name
    return ""


def _culprit_is_stdlib(culprit: str) -> bool:
    # "frozenset[str]" (a generic alias called as a constructor) is a builtin too.
    head = culprit.split(".", 1)[0].split("[", 1)[0]
    return head in sys.stdlib_module_names or head == "builtins" or ("." not in culprit and hasattr(builtins, head))


def _culprit_is_extension(culprit: str) -> bool:
    head = culprit.split(".", 1)[0]
    if not culprit or _culprit_is_stdlib(culprit) or head == "torch":
        return False
    return "." in culprit


def _matches(rule: Rule, gb_id: str, culprit: str, modules: list[str], exceptions: Sequence[str]) -> bool:
    if gb_id and gb_id in rule.gb_ids:
        return True
    if rule.exceptions and any(e in rule.exceptions for e in exceptions):
        return True
    if rule.through and any(m == t or m.startswith(t + ".") for m in modules for t in rule.through):
        return True
    if rule.culprits and culprit.startswith(rule.culprits):
        return True
    refused = gb_id in _REFUSED_CALL
    if rule.extension_culprit and refused and _culprit_is_extension(culprit):
        return True
    if rule.stdlib_culprit and refused and _culprit_is_stdlib(culprit):
        return True
    return False


def match(gb_id: str, culprit: str, stack: list[Frame], exceptions: Sequence[str] = ()) -> tuple[Category, Rule | None]:
    """The category of one break -- the first (by priority) with a matching
    rule -- and that rule (None for the fallback category)."""
    modules = [m for m in (stdlib_module(f) for f in stack) if m]
    for category in categories.by_priority():
        for rule in category.rules:
            if _matches(rule, gb_id, culprit, modules, exceptions):
                return category, rule
    return categories.get(categories.FALLBACK), None


def classify(gb_id: str, culprit: str, stack: list[Frame], exceptions: Sequence[str] = ()) -> str:
    """The name of :func:`match`'s category."""
    return match(gb_id, culprit, stack, exceptions)[0].name


def advice_for(category: Category, rule: Rule | None) -> str:
    """The recipe whose text is the suggested fix: the rule's, else the category's."""
    return (rule.advice if rule is not None else "") or category.advice

"""Which kind of break is this? Each category's rules (analysis/categories/),
tried in priority order; the first category with a matching rule wins.

What a break looks like is not what it is (docs/design.md, "What a break
looks like is not what it is"):
``subprocess.check_output`` surfaces as a skipped ``_thread.allocate_lock``
inside ``subprocess.py``, ``Path.exists()`` as a skipped ``posix.stat``. So
the rules look at the stack the break was reached through and at the
callable Dynamo refused (the culprit), not only at the message.
"""

from __future__ import annotations

import builtins
import re
import sys

from graphbreak_doctor.analysis import categories
from graphbreak_doctor.analysis.categories import Rule
from graphbreak_doctor.findings import Frame
from graphbreak_doctor.frames import stdlib_module

# Dynamo's names for calls it refuses to trace (torch/_dynamo/graph_break_registry.json).
_REFUSED_CALL = frozenset({
    "Attempted to call function marked as skipped",
    "Unsupported function call",
    "Unsupported method call",
    "Failed to trace builtin operator",
    "Unsupported context manager",
    "Attempted to inline function marked as skipped",
})


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


def _matches(rule: Rule, gb_type: str, culprit: str, modules: list[str]) -> bool:
    if gb_type in rule.gb_types:
        return True
    if rule.through and any(m == t or m.startswith(t + ".") for m in modules for t in rule.through):
        return True
    if rule.culprits and culprit.startswith(rule.culprits):
        return True
    refused = gb_type in _REFUSED_CALL
    if rule.extension_culprit and refused and _culprit_is_extension(culprit):
        return True
    if rule.stdlib_culprit and refused and _culprit_is_stdlib(culprit):
        return True
    return False


def classify(gb_type: str, culprit: str, stack: list[Frame]) -> str:
    """The category of one break: the first (by priority) whose rules match."""
    modules = [m for m in (stdlib_module(f) for f in stack) if m]
    for category in categories.by_priority():
        if any(_matches(rule, gb_type, culprit, modules) for rule in category.rules):
            return category.name
    return categories.FALLBACK

"""Pieces of the examples advice shows, cut from the break's own source lines:
the call expression with its arguments, the target of a ``with``, the
condition of an ``if``. Each returns "" when the line does not have the shape
asked for; the advice then shows its generic snippet."""

from __future__ import annotations

import re

_WITH = re.compile(r"^\s*(?:async\s+)?with\s+(?P<expr>.+?)(?P<alias>\s+as\s+[\w.,\s()]+)?\s*:\s*(?:#.*)?$")
_IF = re.compile(r"^\s*(?:el)?if\s+(?P<cond>.+?)\s*:\s*(?:#.*)?$")


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def short_name(qualified: str) -> str:
    """The name a call is written with: "types.SimpleNamespace" -> "SimpleNamespace",
    "frozenset[str]" -> "frozenset"."""
    return qualified.split("[", 1)[0].rsplit(".", 1)[-1]


def call_expression(line: str, name: str) -> str:
    """The call of ``name`` in ``line`` with its arguments ("types.SimpleNamespace(dim=dim, eps=1e-5)");
    "" when the line does not hold the whole call."""
    if not name:
        return ""
    m = re.search(r"[\w.]*\b" + re.escape(name) + r"(?:\[[^\]]*\])?\(", line)
    if m is None:
        return ""
    depth = 0
    for i in range(m.end() - 1, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            return line[m.start(): i + 1]
    return ""


def with_parts(line: str) -> tuple[str, str]:
    """(context expression, " as name" or "") of a ``with`` line; ("", "") otherwise."""
    m = _WITH.match(line)
    return (m.group("expr"), m.group("alias") or "") if m else ("", "")


def if_condition(line: str) -> str:
    m = _IF.match(line)
    return m.group("cond") if m else ""


def constant_name(name: str) -> str:
    """A module-level name for a precomputed value: "probe_version" -> "_PROBE_VERSION"."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", short_name(name) or "value")
    return "_" + re.sub(r"\W+", "_", words).strip("_").upper()


def before_after(where: str, before: list[str], after_note: str, after: list[str]) -> str:
    """The layout every example shares."""
    return "\n".join([f"# before ({where})", *before, "", f"# after: {after_note}", *after])

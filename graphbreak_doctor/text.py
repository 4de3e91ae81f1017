"""Small wording helpers shared by every place that writes for a person."""

from __future__ import annotations

import copy
import dataclasses
import enum


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """'1 break', '3 breaks'."""
    return f"{count} {noun if count == 1 else (plural or noun + 's')}"


def escape_controls(text: str, keep: str = "") -> str:
    """``text`` with every character that is not printable shown as its
    Python escape (``\\x1b``, ``\\x00``, ``\\x9d``, ``\\u202e``): the C0 and C1
    controls -- so no escape sequence (CSI colours, OSC window titles and
    links, screen clears) and no bell reaches a terminal --, DEL, Unicode
    format characters (bidirectional overrides) and line separators.
    Characters in ``keep`` (``"\\n"`` for text of several lines) stay.

    The one escaping function for untrusted text on its way to a person: the
    command line writes all its terminal output through it (cli/common.py
    ``show``), the one-line error messages use it, and the HTML templates
    apply it to every value they print (render/html.py)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in text)


def inert(text: str) -> str:
    """``text`` (one line) with nothing in it a CI runner takes for a
    workflow command: ``::`` where the line starts once its leading blanks
    are stripped (GitHub's runner strips them before it looks), and the
    older ``##[`` form, which it finds anywhere in a line -- their first
    character shown as its escape."""
    stripped = text.lstrip()
    if stripped.startswith("::"):
        at = len(text) - len(stripped)
        text = f"{text[:at]}\\x3a{text[at + 1:]}"
    return text.replace("##[", "#\\x23[")


def one_line(text: str, limit: int = 400) -> str:
    """The first line of a message, with control characters (NUL, escape
    sequences) shown as escapes, so a hostile or multi-line message stays one
    readable line on a terminal or in a CI log."""
    first = next((line for line in str(text).splitlines() if line.strip()), "")
    shown = inert(escape_controls(first))
    more = len(str(text).strip().splitlines()) > 1
    if len(shown) > limit:
        shown, more = shown[:limit], True
    return shown + (" ..." if more else "")


# A dataclass field holding text of several lines that a terminal renderer
# shows line by line (a rung's patch): ``field(metadata={LINES: True})``.
LINES = "lines"


class Lines(tuple):
    """The lines of such a field, each made one line (``escape_controls``,
    ``inert``): what :func:`one_line_values` puts in its place. A renderer
    prints each after a gutter that is not blank."""


def lines_of(text: str | Lines) -> Lines:
    """``text``'s lines as :class:`Lines`; ``text`` itself where it already is."""
    if isinstance(text, Lines):
        return text
    return Lines(inert(escape_controls(line)) for line in text.rstrip("\n").splitlines())


def one_line_values(obj):
    """A copy of ``obj`` -- a dataclass (findings, a gate report, a diff, a
    matrix), or lists, tuples, sets and dicts of them -- in which every string
    is one line: control characters, newlines included, shown as escapes
    (``escape_controls``). What a terminal renderer reads (render/renderer.py),
    so a value from a file made elsewhere is printed as one line whatever it
    holds: it can neither end the line it is on nor start one of its own (a
    forged ``::error::`` workflow command, a fake verdict), nor hold a
    workflow command where the line would start (``inert``). Strings that are
    printable and hold no command, and so every comparison a renderer makes
    on them, are unchanged; enum members are kept as they are. A field marked
    ``LINES`` becomes its :class:`Lines`."""
    return _one_line(obj, {})


# Free-form values (a target's facts) may nest deeper than any renderer
# shows; below this depth they are cut, not walked into a RecursionError.
_MAX_DEPTH = 64


def _one_line(obj, seen: dict, depth: int = 0):
    if isinstance(obj, str):
        return obj if isinstance(obj, enum.Enum) else inert(escape_controls(obj))
    if obj is None or isinstance(obj, (bool, int, float, bytes, enum.Enum)):
        return obj
    if depth > _MAX_DEPTH:
        return "... (nested too deeply to show)"
    key = id(obj)
    if key in seen:
        return seen[key]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = copy.copy(obj)
        seen[key] = new
        for f in dataclasses.fields(obj):
            if not hasattr(obj, f.name):
                continue
            value = getattr(obj, f.name)
            if f.metadata.get(LINES) and isinstance(value, str):
                shown = lines_of(value)
            else:
                shown = _one_line(value, seen, depth + 1)
            object.__setattr__(new, f.name, shown)
        return new
    if isinstance(obj, dict):
        new_dict: dict = {}
        seen[key] = new_dict
        for k, v in obj.items():
            new_dict[_one_line(k, seen, depth + 1)] = _one_line(v, seen, depth + 1)
        return new_dict
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [_one_line(v, seen, depth + 1) for v in obj]
        if isinstance(obj, list):
            new_seq = items
        elif hasattr(obj, "_fields"):  # a named tuple
            new_seq = type(obj)(*items)
        else:
            new_seq = type(obj)(items)
        seen[key] = new_seq
        return new_seq
    return obj

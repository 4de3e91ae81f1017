"""Small wording helpers shared by every place that writes for a person."""

from __future__ import annotations


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


def one_line(text: str, limit: int = 400) -> str:
    """The first line of a message, with control characters (NUL, escape
    sequences) shown as escapes, so a hostile or multi-line message stays one
    readable line on a terminal or in a CI log."""
    first = next((line for line in str(text).splitlines() if line.strip()), "")
    shown = escape_controls(first)
    more = len(str(text).strip().splitlines()) > 1
    if len(shown) > limit:
        shown, more = shown[:limit], True
    return shown + (" ..." if more else "")

"""Small wording helpers shared by every place that writes for a person."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """'1 break', '3 breaks'."""
    return f"{count} {noun if count == 1 else (plural or noun + 's')}"


def one_line(text: str, limit: int = 400) -> str:
    """The first line of a message, with control characters (NUL, escape
    sequences) shown as escapes, so a hostile or multi-line message stays one
    readable line on a terminal or in a CI log."""
    first = next((line for line in str(text).splitlines() if line.strip()), "")
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in first)
    more = len(str(text).strip().splitlines()) > 1
    if len(shown) > limit:
        shown, more = shown[:limit], True
    return shown + (" ..." if more else "")

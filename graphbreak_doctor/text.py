"""Small wording helpers shared by every place that writes for a person."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """'1 break', '3 breaks'."""
    return f"{count} {noun if count == 1 else (plural or noun + 's')}"

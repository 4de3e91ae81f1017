"""Renderers: one module per output format, each a function of the findings only."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """'1 break', '3 breaks'."""
    return f"{count} {noun if count == 1 else (plural or noun + 's')}"


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write a whole file or nothing: a crash never leaves a half-written report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        # mkstemp creates 0600; a report is an ordinary file (0666 less umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path

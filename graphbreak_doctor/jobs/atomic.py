"""Writing a JSON file whole: a temporary file beside it, then renamed over
it, so a reader (another doctor, the parent reading a worker's result) sees
the old file or the new one, never part of one. Standard library only."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any


def replace_json(path: str | os.PathLike, data: Any, *, compact: bool = False) -> None:
    """Write ``data`` to ``path`` whole; an OSError leaves no temporary file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":") if compact else None)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

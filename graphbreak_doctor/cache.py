"""The doctor's own cache folder: ``$GRAPHBREAK_DOCTOR_CACHE``, else
``graphbreak-doctor`` under ``$XDG_CACHE_HOME`` (default ``~/.cache``).
What lives there: the matrix's environments (``matrix-envs/``) and host builds
of FlashInfer's planners (``host-build/``)."""

from __future__ import annotations

import os
from pathlib import Path


CACHE_ENV = "GRAPHBREAK_DOCTOR_CACHE"
# GRAPHBREAK_DOCTOR_NO_CACHE=1: the findings cache is off (nothing recorded, read or kept).
OFF_ENV = "GRAPHBREAK_DOCTOR_NO_CACHE"


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "graphbreak-doctor"

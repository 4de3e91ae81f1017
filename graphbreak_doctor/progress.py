"""Progress lines on stderr, shown when stderr is a terminal; quiet in CI logs."""

from __future__ import annotations

import sys


class Progress:
    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"graphbreak-doctor: {message}...", file=sys.stderr, flush=True)

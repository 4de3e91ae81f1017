import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the installed console entry point the way a user does."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "graphbreak_doctor", *args],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600,
    )


@pytest.fixture
def cli():
    return run_cli

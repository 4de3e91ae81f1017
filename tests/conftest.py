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


def sglang_has_tc_piecewise() -> bool:
    """Whether the installed SGLang still offers its tc_piecewise prefill
    runner to users (read from its files, not imported: SGLang is imported
    only inside an emulated device): a release with per-phase CUDA-graph
    backends accepts it unless it says it was removed; an older one has the
    piecewise CUDA-graph options."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        return False
    root = Path(spec.origin).parent / "srt"
    config = root / "model_executor" / "cuda_graph_config.py"
    if config.exists():
        return "tc_piecewise was removed" not in config.read_text(encoding="utf-8")
    return "piecewise_cuda_graph" in (root / "server_args.py").read_text(encoding="utf-8")


@pytest.fixture
def cli():
    return run_cli

"""`fix --write-patch` on SGLang's own GLM-5 code, at SGLang's own capture
sizes (read from the launch arguments the installed release resolves).
Releases with a prefill runner that compiles with torch.compile: 0.5.9's
piecewise runner (`make test-sglang-0.5.9`), 0.5.21's tc_piecewise runner
backend (`make test-sglang-0.5.21`); 0.5.23 has neither and skips."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_cli, sglang_has_tc_piecewise
from graphbreak_doctor.model import Findings
from graphbreak_doctor.model.loader import build

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")]


def _server_args() -> str:
    """Which flag the installed release's server arguments take for a compiled prefill."""
    spec = importlib.util.find_spec("sglang")
    text = (Path(spec.origin).parent / "srt" / "server_args.py").read_text(encoding="utf-8") if spec else ""
    return text


def _findings(path: Path) -> Findings:
    return build(Findings, json.loads(path.read_text(encoding="utf-8")))


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SGLANG or "--enable-piecewise-cuda-graph" not in _server_args(),
                    reason="the release has no --enable-piecewise-cuda-graph")
def test_the_users_story_end_to_end_on_the_piecewise_runner(tmp_path):
    """SGLang's dense layer with --enable-piecewise-cuda-graph: the ladder's
    patch, loaded with PYTHONPATH=DIR in fresh processes, gives fullgraph OK
    at the smallest, a middle and the largest of the release's own capture
    token list; a fresh `trace` with it at the smallest size too; without it,
    the original failure."""
    folder, out = tmp_path / "patch", tmp_path / "fix.json"
    args = ("--layer", "dense", "--impl", "sglang", "--device", "sm120", "--sglang-args",
            "--enable-piecewise-cuda-graph")
    proc = run_cli("fix", *args, "--write-patch", str(folder), "--json", str(out), "--no-html")
    assert proc.returncode == 0, proc.stderr[-3000:]
    fixed = _findings(out)
    patch = fixed.fix.patch
    sizes = fixed.target.facts["launch"]["resolved"]["piecewise_cuda_graph_tokens"]
    assert patch.sizes == sizes and "piecewise_cuda_graph_tokens" in patch.sizes_from
    picked = [min(sizes), sorted(sizes)[len(sizes) // 2], max(sizes)]
    assert [c.size for c in patch.checks] == picked
    assert patch.verified and patch.summary.startswith(
        f"verified: fresh process, sizes {', '.join(map(str, picked))}: fullgraph ok; the user's program: ")
    first = next(b for b in fixed.breaks if b.id == fixed.fullgraph.break_id)
    assert not fixed.fullgraph.ok and first.category == "subprocess"

    traced = tmp_path / "trace.json"
    proc = run_cli("trace", *args, "--tokens", str(min(sizes)), "--mode", "fullgraph", "--json", str(traced),
                   "--no-html", env={"PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])})
    assert proc.returncode == 0, proc.stderr[-2000:]
    with_patch = _findings(traced)
    assert with_patch.fullgraph.ok is True
    assert with_patch.environment["patch"].startswith("patched ")

    installed = Path(importlib.util.find_spec("flashinfer").origin).parents[1]
    diff = folder / patch.diff
    # The diff names files under flashinfer/: a dry run in a clean copy of those files.
    copy = tmp_path / "copy"
    for line in diff.read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ b/"):
            rel = line[len("+++ b/"):]
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            (copy / rel).write_bytes((installed / rel).read_bytes())
    dry = subprocess.run(["patch", "-p1", "--dry-run", "-i", str(diff)], cwd=copy, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout + dry.stderr


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SGLANG or not sglang_has_tc_piecewise()
                    or "--enable-piecewise-cuda-graph" in _server_args(),
                    reason="the release has no tc_piecewise prefill runner backend")
def test_a_tc_piecewise_model_patch_holds_where_the_ladder_stopped(tmp_path):
    """The model forward as SGLang's tc_piecewise runner compiles it: the
    ladder goes as far as it can; fresh processes at three of SGLang's
    capture sizes end where the ladder ended, so every kept change held."""
    folder, out = tmp_path / "patch", tmp_path / "fix.json"
    proc = run_cli("fix", "--model", "--device", "sm120", "--sglang-args", "--cuda-graph-backend-prefill tc_piecewise",
                   "--write-patch", str(folder), "--json", str(out), "--no-html")
    fixed = _findings(out)
    patch = fixed.fix.patch
    assert patch is not None and fixed.fix.changes, proc.stderr[-3000:]
    assert len(patch.checks) == 3 and all(c.size in patch.sizes for c in patch.checks)
    assert patch.verified, patch.summary
    if fixed.fix.ok:
        assert all(c.outcome == "fullgraph ok" for c in patch.checks)
    else:  # what is left is listed with why
        assert fixed.fix.stopped_break and "no recipe applies" in fixed.fix.stopped
        assert all("where the ladder stopped: every change held" in c.outcome for c in patch.checks)
        assert "The ladder did not reach fullgraph: " in (folder / "README.txt").read_text(encoding="utf-8")
    assert proc.returncode == 0, proc.stderr[-2000:]

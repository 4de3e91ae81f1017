"""A trace starts from the state a server compiles in: the target runs
eagerly once first (a server's warm-up), and its fullgraph verdict is also
traced cold; a first failure that differs is reported, and `--cold` traces
the cold state.

Real runs on FlashInfer's own `norm.rmsnorm` (emulated sm120): on 0.6.3 its
JIT registry stamps a new spec with `datetime.now` (cold) but, once the
kernel has loaded, asks the file system whether it is an AOT build
(`JitSpec.is_aot`) -- the failure users report from warmed-up servers.
"""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from conftest import run_cli

pytestmark = pytest.mark.flashinfer_version

FLASHINFER = importlib.metadata.version("flashinfer-python")
RMSNORM = "fixtures.flashinfer_targets:rmsnorm"


def _trace(tmp_path, *extra: str) -> tuple[str, dict]:
    out = tmp_path / "f.json"
    done = run_cli("trace", "--target", RMSNORM, "--mode", "fullgraph", "--json", str(out), "--no-html", *extra)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, json.loads(out.read_text())


def _first(findings: dict) -> dict:
    fg = findings["fullgraph"]
    return next(b for b in findings["breaks"] if b["id"] == fg["break_id"])


@pytest.mark.skipif(FLASHINFER != "0.6.3", reason="the state-dependent first failure is FlashInfer 0.6.3's")
def test_rmsnorm_stops_elsewhere_warm_and_cold_and_says_why(tmp_path):
    stdout, warm = _trace(tmp_path)
    first = _first(warm)
    assert (first["category"], first["culprit"]) == ("filesystem", "posix.stat")
    assert first["actionable_frame"]["qualname"] == "JitSpec.is_aot"
    up = warm["warm_up"]
    assert up["ran"] and up["how"] == "one eager call at the traced size"
    assert "norm (load)" in up["loaded"]
    assert up["cold"] == "failed" and up["cold_failure"]["culprit"] == "datetime.datetime.now"
    assert up["cold_failure"]["function"] == "JitSpecRegistry.register"
    said = up["state_dependent"]
    assert said.startswith("the first failure depends on the process state")
    assert "datetime.datetime.now" in said and "posix.stat" in said and "norm (load)" in said
    assert "state-dependent: the first failure depends on the process state" in stdout

    stdout, cold = _trace(tmp_path, "--cold")
    first = _first(cold)
    assert (first["category"], first["culprit"]) == ("unsupported-builtin", "datetime.datetime.now")
    assert cold["warm_up"] == {**cold["warm_up"], "ran": False, "how": "skipped (--cold)", "cold": ""}
    assert "warm-up: skipped (--cold)" in stdout


@pytest.mark.skipif(FLASHINFER != "0.7.4", reason="FlashInfer 0.7.4's answer")
def test_rmsnorm_on_0_7_4_stops_at_the_same_call_warm_and_cold(tmp_path):
    _stdout, warm = _trace(tmp_path)
    up = warm["warm_up"]
    assert up["ran"] and up["cold"] == "failed" and not up["state_dependent"]
    assert up["cold_failure"]["culprit"] == _first(warm)["culprit"]

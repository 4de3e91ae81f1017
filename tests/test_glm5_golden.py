"""Golden results: what the doctor finds in GLM-5-NVFP4's dense and MoE layers.

One file per (layer, device, FlashInfer version) under tests/golden/, holding
the fullgraph verdict and, per distinct break, category + actionable function
+ package (no line numbers), so a change in what the doctor finds shows up in
review. Regenerate after an intended change with
    GRAPHBREAK_DOCTOR_UPDATE_GOLDEN=1 make test
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import tempfile
from pathlib import Path

import pytest

from graphbreak_doctor.findings import Findings

pytestmark = [pytest.mark.slow, pytest.mark.flashinfer]

GOLDEN = Path(__file__).parent / "golden"
FLASHINFER = importlib.metadata.version("flashinfer-python")
PINNED = ("0.7.4", "0.6.3")
CASES = [(layer, device) for layer in ("dense", "moe") for device in ("sm120", "sm100")]


def summary(findings) -> dict:
    return {
        "fullgraph_ok": findings.fullgraph.ok,
        "fullgraph_first": _entry(findings.break_by_id(findings.fullgraph.break_id)),
        "breaks": [_entry(b) for b in findings.breaks],
    }


def _entry(b) -> dict | None:
    if b is None:
        return None
    function = b.actionable_frame.qualname if b.actionable_frame else ""
    return {"category": b.category, "function": function, "package": b.package}


_traced: dict = {}


def traced(cli, layer: str, device: str):
    """Findings of `graphbreak-doctor trace --layer L` in a fresh process, as a
    user runs it: FlashInfer keeps process-wide state (its autotuner singleton
    is created, under a lock, by the first call), so a trace after other
    traces in the same process can see fewer breaks."""
    if (layer, device) not in _traced:
        out = Path(tempfile.mkdtemp()) / "findings.json"
        result = cli("trace", "--layer", layer, "--device", device, "--json", str(out), "--no-html")
        assert result.returncode in (0, 3), result.stderr
        _traced[(layer, device)] = Findings.from_json(out.read_text())
    return _traced[(layer, device)]


@pytest.mark.skipif(FLASHINFER not in PINNED, reason=f"golden files are for flashinfer {PINNED}")
@pytest.mark.parametrize("layer,device", CASES)
def test_golden(cli, layer, device):
    path = GOLDEN / f"glm5-{layer}-{device}-flashinfer-{FLASHINFER}.json"
    got = summary(traced(cli, layer, device))
    if os.environ.get("GRAPHBREAK_DOCTOR_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(got, indent=2) + "\n")
    assert path.exists(), f"no golden file {path.name}; run with GRAPHBREAK_DOCTOR_UPDATE_GOLDEN=1"
    assert got == json.loads(path.read_text())


@pytest.mark.skipif(FLASHINFER != "0.6.3", reason="the user's story is on flashinfer 0.6.3")
def test_user_story_dense_sm120_shows_subprocess_and_filesystem_in_fp4_quantization(cli):
    findings = traced(cli, "dense", "sm120")
    first = findings.break_by_id(findings.fullgraph.break_id)
    assert findings.fullgraph.ok is False and first.category == "subprocess"
    by_category = {}
    for b in findings.breaks:
        by_category.setdefault(b.category, []).append(b)
    for category in ("subprocess", "filesystem"):
        assert any(
            any(f.function == "fp4_quantize" and "flashinfer" in f.file for f in b.stack) for b in by_category[category]
        ), f"no {category} break reached from flashinfer.fp4_quantize"
    assert any(b.package == "flashinfer" and "jit/cpp_ext.py" in b.actionable_frame.file
               for b in by_category["subprocess"])


@pytest.mark.parametrize("layer,device", CASES)
def test_findings_record_what_was_traced(cli, layer, device):
    info = traced(cli, layer, device).target
    shapes, facts = info.shapes, info.facts
    assert info.provider == "glm5" and info.title.endswith(f"{layer} layer {0 if layer == 'dense' else 3}")
    assert facts["layer_kind"] == layer
    assert shapes["hidden_size"] == 6144 and shapes["tokens"] == 128 and shapes["tp"] == 1
    assert facts["weight_formats"] and facts["flashinfer_version"] == FLASHINFER
    assert info.split_ops == ["graphbreak_doctor::mla_attention"]
    if layer == "moe":
        assert shapes["n_routed_experts"] == 256 and shapes["experts_per_tok"] == 8


@pytest.mark.parametrize("layer,device", CASES)
def test_emulation_never_appears_in_layer_findings(cli, layer, device):
    findings = traced(cli, layer, device)
    assert findings.device["emulated"] is True
    text = findings.to_json()
    for part in ("graphbreak_doctor/emulation", "graphbreak_doctor.emulation"):
        assert part not in text

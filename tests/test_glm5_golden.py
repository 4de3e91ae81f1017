"""Golden results: what the doctor finds in GLM-5-NVFP4's dense and MoE layers.

One file per (layer, device, FlashInfer version) under tests/golden/, holding
the exit code (and the crash, when one is expected), the fullgraph verdict
and, per distinct break, category + actionable function + package + gb_type +
hit count (no line numbers), so a change in what the doctor finds shows up in
review. After an intended change,
    GRAPHBREAK_DOCTOR_UPDATE_GOLDEN=1 make test
rewrites the files that differ, and those tests fail with what changed.
"""

from __future__ import annotations

import importlib.metadata

import pytest

from conftest import ROOT, check_golden, golden_summary

pytestmark = [pytest.mark.slow, pytest.mark.flashinfer_version]

GOLDEN = ROOT / "tests" / "golden"
FLASHINFER = importlib.metadata.version("flashinfer-python")
PINNED = ("0.7.4", "0.6.3")
CASES = [(layer, device) for layer in ("dense", "moe") for device in ("sm120", "sm100")]


def layer_args(layer: str, device: str) -> tuple[str, ...]:
    """`graphbreak-doctor trace` of a layer as `make trace` and .ci/run's gate run it."""
    return ("--layer", layer, "--impl", "reference", "--device", device, "--mode", "both")


def traced(traces, layer: str, device: str):
    """`graphbreak-doctor trace --layer L` in a fresh process, as a user runs it
    (FlashInfer keeps process-wide state: its autotuner singleton is created,
    under a lock, by the first call, so a trace after other traces in the
    same process can see fewer breaks); shared through the session's traces."""
    return traces.get(*layer_args(layer, device))


@pytest.mark.skipif(FLASHINFER not in PINNED, reason=f"golden files are for flashinfer {PINNED}")
@pytest.mark.parametrize("layer,device", CASES)
def test_golden(traces, layer, device):
    check_golden(GOLDEN / f"glm5-{layer}-{device}-flashinfer-{FLASHINFER}.json",
                 golden_summary(traced(traces, layer, device)))


@pytest.mark.skipif(FLASHINFER != "0.6.3", reason="the user's story is on flashinfer 0.6.3")
def test_user_story_dense_sm120_shows_subprocess_and_filesystem_in_fp4_quantization(traces):
    # Cold: the story is a fresh process's first call (a warm-up takes the file-system probe away).
    findings = traces.get(*layer_args("dense", "sm120"), "--cold").findings
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
def test_findings_record_what_was_traced(traces, layer, device):
    info = traced(traces, layer, device).findings.target
    shapes, facts = info.shapes, info.facts
    assert info.provider == "glm5" and info.title.endswith(f"{layer} layer {0 if layer == 'dense' else 3}")
    assert facts["layer_kind"] == layer
    assert shapes["hidden_size"] == 6144 and shapes["tokens"] == 128 and shapes["tp"] == 1
    assert facts["weight_formats"] and facts["flashinfer_version"] == FLASHINFER
    assert info.split_ops == ["graphbreak_doctor::mla_attention"]
    if layer == "moe":
        assert shapes["n_routed_experts"] == 256 and shapes["experts_per_tok"] == 8


@pytest.mark.parametrize("layer,device", CASES)
def test_emulation_never_appears_in_layer_findings(traces, layer, device):
    findings = traced(traces, layer, device).findings
    assert findings.device["emulated"] is True
    text = findings.to_json()
    for part in ("graphbreak_doctor/emulation", "graphbreak_doctor.emulation"):
        assert part not in text

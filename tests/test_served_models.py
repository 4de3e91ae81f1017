"""The packaged models other than GLM-5, served as SGLang serves them: the
model class SGLang's registry resolves from the config folder, built by its
loader, and run with the KV pool and attention backends SGLang's model
runner would pick for the model on the device (an MHA/GQA model, an MLA
model without DSA). Runs in the SGLang environment (`make test-sglang`).

One `trace --mode fullgraph` per model: it carries the compile map (traced
first, in a job of its own: both phases run, the regions they enter, each
phase's capture backend) and the fullgraph verdict of the reduced model
forward. The session's traces share it between the tests."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import Traced
from graphbreak_doctor.model import Findings

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.slow,
              pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")]

PHASES = ("extend", "decode")

# Per packaged model: the class SGLang's registry serves it with, the
# quantization SGLang reads from its config, and the KV pool and attention
# backend SGLang's model runner picks for it on sm100.
MODELS = {
    "qwen3-30b-a3b": {"model_class": "sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM", "quantization": "none",
                      "pool": "MHATokenToKVPool", "attention": "trtllm_mha"},
    "deepseek-v3": {"model_class": "sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM", "quantization": "fp8",
                    "pool": "MLATokenToKVPool", "attention": "trtllm_mla"},
}


def traced(traces, model: str) -> tuple[Traced, Findings]:
    run = traces.get("--model-path", model, "--device", "sm100", "--mode", "fullgraph")
    assert run.code == 0 and run.findings is not None, run.stderr[-3000:]
    return run, run.findings


def value(findings: Findings, start: str) -> str:
    (line,) = [v for v in findings.target.facts["values_used"] if v.startswith(start)]
    return line


@pytest.mark.parametrize("model", MODELS)
def test_the_map_names_the_class_and_quantization_sglang_resolved(traces, model):
    _, findings = traced(traces, model)
    facts = findings.target.facts
    assert facts["model_class"] == MODELS[model]["model_class"]
    assert facts["quantization"] == MODELS[model]["quantization"]
    assert facts["scope"] == "model" and 0 < facts["layers_built"] <= facts["model_layers"]
    # The findings name the framework and the model that built them.
    assert findings.target.provider == "sglang/" + MODELS[model]["model_class"].rsplit(".", 1)[1].lower().removesuffix(
        "forcausallm")


@pytest.mark.parametrize("model", MODELS)
def test_both_phases_run_with_the_pool_and_backend_sglang_picks(traces, model):
    _, findings = traced(traces, model)
    phases = findings.target.facts["launch"]["phases"]
    # Each phase's capture backend, as SGLang resolved the launch; neither
    # phase stopped (a stop is written into its line).
    assert set(phases) == set(PHASES), phases
    for phase in PHASES:
        assert "CUDA graph" in phases[phase], phases
        assert "not run here" not in phases[phase] and "stopped here" not in phases[phase], phases
    # The traced batch's forward state: the runner's KV pool and attention
    # backend are the ones SGLang's model runner makes for this model.
    expected = MODELS[model]
    assert f"({expected['pool']}: " in value(findings, "KV cache:")
    assert f"({expected['attention']} for extend)" in value(findings, "attention backend:")


@pytest.mark.parametrize("model", MODELS)
def test_the_map_lists_the_regions_the_forwards_enter(traces, model):
    _, findings = traced(traces, model)
    # Importing SGLang registers the compile sites of every model it ships;
    # a region the forwards entered names the phases that called it, and was
    # traced to a verdict of its own.
    registered = [r for r in findings.regions if not r.entered]
    assert len(registered) > 10, [r.function for r in findings.regions]
    for region in findings.regions:
        if region.entered:
            assert set(region.calls) <= set(PHASES) and region.verdict, region


@pytest.mark.parametrize("model", MODELS)
def test_a_fullgraph_trace_of_the_model_forward_ends_in_a_verdict(traces, model):
    _, findings = traced(traces, model)
    assert findings.modes == ["fullgraph"] and findings.outcome == "complete"
    assert findings.target.function.endswith("Model.forward")
    assert findings.fullgraph.ran and not findings.fullgraph.crashed
    # The verdict: a clean graph, or the break that ended it, listed.
    assert findings.fullgraph.ok or findings.break_by_id(findings.fullgraph.break_id) is not None


@pytest.mark.parametrize("model", MODELS)
def test_each_phase_is_captured_by_the_backend_sglang_resolved_for_it(traces, model):
    """The CUDA-graph map of the same run: each phase's backend is the
    launch's, and every capture the doctor ran (three sizes per captured
    phase) finished on the model's own attention backend."""
    _, findings = traced(traces, model)
    config = findings.target.facts["launch"]["resolved"]["cuda_graph_config"]
    for phase in findings.cudagraphs.phases:
        assert phase.backend == config[phase.phase]["backend"], phase
        if phase.backend in ("full", "breakable"):
            assert len(phase.captures) == 3 and all(c.error == "" and c.segments for c in phase.captures), phase
        else:
            assert phase.captures == [] and phase.note, phase
    assert findings.cudagraphs.hazards() == []

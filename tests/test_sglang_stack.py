"""SGLang's whole GLM-5 decoder layer and its model forward
(``trace --whole-layer`` / ``trace --model``), with a ForwardBatch, a KV pool
and attention metadata, in the SGLang environment (``make test-sglang``;
skipped where SGLang is not installed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphbreak_doctor.model import Findings

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")]

ROOT = Path(__file__).resolve().parents[1]

def traced(traces, *args: str) -> tuple[int, Findings | None, str]:
    """(exit code, findings, stderr) of `trace ARGS --json`, once per arguments (the session's traces)."""
    done = traces.get(*args)
    return done.code, done.findings, done.stderr


def sparse_mla_plans_on_host() -> bool:
    """Whether the installed FlashInfer's SM120 sparse MLA asks a host planner
    (resolve_attention); an older one launches its kernels without one."""
    # Read, not imported: some FlashInfer releases import only on a device.
    home = Path(list(importlib.util.find_spec("flashinfer").submodule_search_locations)[0]) / "mla"
    return any("resolve_attention" in path.read_text(errors="replace")
               for path in home.rglob("*.py") if "_sparse_mla_sm120" in str(path))


def value(findings: Findings, start: str) -> str:
    (line,) = [v for v in findings.target.facts["values_used"] if v.startswith(start)]
    return line


@pytest.mark.slow
@pytest.mark.parametrize("layer,phase,device", [("dense", "extend", "sm100"), ("moe", "decode", "sm100"),
                                                ("dense", "extend", "sm120"), ("moe", "decode", "sm120")])
def test_whole_layer_traces_with_a_forward_batch(traces, layer, phase, device):
    code, findings, stderr = traced(traces, "--layer", layer, "--whole-layer", "--forward", phase, "--device", device,
                                    "--mode", "both", "--tokens", "16")
    assert code == 0 and findings is not None, stderr[-3000:]
    facts = findings.target.facts
    assert (facts["scope"], facts["phase"], facts["layer_kind"]) == ("layer", phase, layer)
    assert findings.target.function == "DecoderLayerCall.forward"
    assert findings.fullgraph.ran and not findings.fullgraph.crashed
    # The verdict is either a clean graph or a break the findings list.
    assert findings.fullgraph.ok or findings.break_by_id(findings.fullgraph.break_id) is not None
    assert findings.breaks, "the layer's attention prologue has known breaks on this release"
    # Where the trace went: SGLang's attention (DSA) code and its MLP or MoE.
    files = {f.file for b in findings.breaks for f in b.stack}
    assert any("/layers/attention/dsa/" in f for f in files), sorted(files)[:20]
    # The values SGLang computes from tensors, and what was used.
    mode = "EXTEND (1 request, 16 new tokens)" if phase == "extend" else "DECODE (16 requests, 16 new tokens)"
    assert value(findings, "forward mode:") == f"forward mode: {mode}"
    # The attention SGLang picks for the device: trtllm-gen's MLA on sm100,
    # FlashInfer's SM120 sparse MLA, whose host planner is compiled here, on sm120.
    if device == "sm100":
        assert "trtllm" in value(findings, "attention backend:")
    else:
        assert "flashinfer_sparse_mla" in value(findings, "attention backend:")
        if sparse_mla_plans_on_host():
            assert "resolve_attention" in findings.device["flashinfer_host_code"]["sparse_mla_sm120"]
        # FlashInfer's SM120 sparse MLA: a package, or (older) one module.
        assert any("/flashinfer/mla/_sparse_mla_sm120" in f for f in files), sorted(files)[:20]
    assert value(findings, "KV cache:").startswith("KV cache: fp8_e4m3")
    # DeepGEMM, one of SGLang's own requirements, is installed in its environment: the DSA
    # indexer calls its MQA-logits kernels as on the server, never SGLang's torch path for them.
    assert importlib.util.find_spec("deep_gemm") is not None
    assert not any(v.startswith("SGLANG_FP8_PAGED_MQA_LOGITS_TORCH") for v in facts["values_used"])
    if phase == "decode":
        assert "deep_gemm::fp8_paged_mqa_logits" in findings.registered_ops(), findings.registered_ops()


@pytest.mark.slow
@pytest.mark.parametrize("device", ["sm100", "sm120"])
def test_model_forward_is_cut_to_one_layer_of_each_kind(traces, device):
    code, findings, stderr = traced(traces, "--model", "--device", device, "--mode", "fullgraph", "--tokens", "16")
    assert code == 0 and findings is not None, stderr[-3000:]
    facts = findings.target.facts
    assert (facts["scope"], facts["layers_built"], facts["model_layers"]) == ("model", 4, 78)
    assert findings.target.function == "DeepseekV2Model.forward"
    assert any("3 dense, 1 MoE" in n for n in findings.target.notes)
    assert findings.fullgraph.ran and not findings.fullgraph.crashed


@pytest.mark.slow
@pytest.mark.parametrize("device", ["sm100", "sm120"])
def test_a_plain_torch_compile_of_the_same_layer_and_batch_agrees(traces, tmp_path, device):
    """fixtures.sglang_plain builds the same whole layer and batch and runs
    torch._dynamo.explain and torch.compile(fullgraph=True, backend="eager")
    on it, with none of the doctor's capture: the fullgraph verdicts agree,
    the first failure is at the line the doctor names, and every break
    explain lists is at a frame the doctor found."""
    args = ("--layer", "dense", "--whole-layer", "--forward", "extend", "--device", device, "--mode", "both",
            "--tokens", "16")
    code, live, stderr = traced(traces, *args)
    assert code == 0 and live is not None, stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "fixtures.sglang_plain", "--layer", "dense", "--whole-layer",
                           "--forward", "extend", "--device", device, "--tokens", "16"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    plain = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain["fullgraph"]["ok"] is live.fullgraph.ok
    if not live.fullgraph.ok:
        site = live.break_by_id(live.fullgraph.break_id).site
        named = {(f["file"], f["line"]) for f in plain["fullgraph"]["stack"]}
        short = "/".join(Path(site.file).parts[-4:])
        assert (site.file, site.line) in named or f"{short}:{site.line}" in plain["fullgraph"].get("message", "")
    frame = lambda f: (f.file, f.line)  # noqa: E731
    sites = {frame(b.site) for b in live.breaks} | {frame(f) for b in live.breaks for f in b.stack}
    # "step_unsupported" entries name where Dynamo compiled what it had before
    # an instruction it could not step over (in an outer frame); the failing
    # step's own reason is listed beside them.
    reasons = [r for r in plain["explain"]["break_reasons"] if r["reason"] != "step_unsupported"]
    assert reasons
    for reason in reasons:
        assert (reason["stack"][-1]["file"], reason["stack"][-1]["line"]) in sites, reason


@pytest.mark.parametrize("args,says", [
    (("--model", "--layer", "dense"), "leave out --layer"),
    (("--layer", "dense", "--forward", "decode"), "--forward applies to --whole-layer and --model"),
    (("--layer", "dense", "--whole-layer", "--impl", "reference"), "need --impl sglang"),
    (("--model", "--whole-layer"), "leave out --whole-layer"),
])
def test_options_that_do_not_fit_together_are_usage_errors(cli, args, says):
    result = cli("trace", *args, "--no-html")
    assert result.returncode == 2
    assert says in result.stderr and "Traceback" not in result.stderr

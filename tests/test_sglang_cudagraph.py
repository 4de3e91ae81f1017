"""The CUDA-graph map of an SGLang launch: SGLang's own capture backends run
on the emulated GPU (`trace --model`), per phase the backend the launch
resolved, at the smallest, a middle and the largest of its capture sizes.
Runs in the SGLang environment (`make test-sglang`).

The hazards are held against SGLang's own code, not a copy: a fresh
interpreter changes two of SGLang's functions in place (their code objects,
so frames keep SGLang's file and lines) -- an `.item()` in a function a
captured segment runs, and one in a function SGLang runs eagerly between
segments (`eager_on_graph`) -- and the map finds the first at its line and
not the second."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, sglang_has_tc_piecewise
from test_sglang_compile_map import _run, default_map

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")]

BREAKABLE = "srt/model_executor/runner_backend/breakable_cuda_graph_backend.py"


def _has_breakable() -> bool:
    """The release has SGLang's breakable backend (read from its files: importing SGLang here would need the
    emulation's stand-ins)."""
    spec = importlib.util.find_spec("sglang")
    return spec is not None and any(Path(p, BREAKABLE).is_file() for p in spec.submodule_search_locations or ())


@pytest.mark.slow
@pytest.mark.skipif(HAS_SGLANG and not _has_breakable(), reason="the release has no breakable CUDA-graph backend")
def test_the_default_launch_captures_decode_whole_and_prefill_in_segments(cli):
    findings = default_map(cli)
    found = findings.cudagraphs
    assert found is not None and found.error == ""
    phases = {p.phase: p for p in found.phases}
    config = findings.target.facts["launch"]["resolved"]["cuda_graph_config"]
    for name, phase in phases.items():
        assert phase.backend == config[name]["backend"] and phase.sizes == sorted(config[name]["bs"])
        sizes = [c.size for c in phase.captures]
        assert sizes == [min(phase.sizes), sizes[1], max(phase.sizes)] and min(phase.sizes) < sizes[1] < max(phase.sizes)
        assert all(c.error == "" for c in phase.captures), [c.error for c in phase.captures]
        # A world of one GPU: SGLang's collectives return before they run one.
        assert all(c.collectives == [] for c in phase.captures), [c.collectives for c in phase.captures]
    decode, prefill = phases["decode"], phases["prefill"]
    assert decode.backend == "full" and all(c.segments == 1 and c.breaks == [] for c in decode.captures)
    assert prefill.backend == "breakable"
    layers = findings.target.facts["layers_built"]
    for capture in prefill.captures:
        # SGLang's eager_on_graph functions cut the forward: one segment more than breaks.
        assert capture.segments == 1 + sum(b.count for b in capture.breaks) > 1
        functions = {b.function for b in capture.breaks}
        assert "pcg_dsa_indexer_prefill_split" in functions, functions  # the DSA indexer, run eagerly
        assert sum(b.count for b in capture.breaks) % layers == 0
    assert found.hazards() == []


@pytest.mark.slow
@pytest.mark.parametrize("device", ["sm100", "sm90"])
def test_every_capture_of_glm5s_default_launch_finishes_on_b200_and_h100(cli, device):
    """Two device paths a GPU server takes and the sm120 map does not: on
    sm100 SGLang's GLM-5 MoE asks FlashInfer's trtllm-gen launcher not to
    finalize at small batches and reads the launcher's own output tensors
    back; on sm90 the DSA prefill calls FlashMLA (the sgl-flash-mla wheel) for
    its sparse attention. Every capture finishes: decode as one whole graph,
    prefill cut only where SGLang runs a call eagerly."""
    code, findings, stderr = _run(cli, "--model", "--model-path", "glm5-nvfp4", "--device", device, "--mode", "map")
    assert code in (0, 1) and findings is not None, stderr[-3000:]
    found = findings.cudagraphs
    assert found is not None and found.error == "" and found.assumed == []
    phases = {p.phase: p for p in found.phases}
    assert set(phases) == {"decode", "prefill"} and all(len(p.captures) == 3 for p in phases.values())
    for phase in phases.values():
        assert all(c.error == "" for c in phase.captures), [c.error for c in phase.captures]
    assert phases["decode"].backend == "full" and all(c.segments == 1 for c in phases["decode"].captures)
    for capture in phases["prefill"].captures:
        assert capture.segments == 1 + sum(b.count for b in capture.breaks) > 1


# Run in a fresh interpreter: SGLang's function changed in place (its code
# object: frames keep SGLang's file and lines) before the map imports it.
_PATCHED = r"""
import ast, importlib, importlib.abc, importlib.util, inspect, json, sys, textwrap
from graphbreak_doctor.compile_map import map_regions
from graphbreak_doctor.diagnose import selection_builder
from graphbreak_doctor.targets.serving import PROVIDER

# A device value read on the host while SGLang's breakable capture is under way.
PROBE = ("_probe = x.float().sum().item() if importlib.import_module('sglang.srt.model_executor."
         "runner_backend_utils.breakable_cuda_graph').is_in_breakable_cuda_graph() else 0")
MODULE, NAME = "sglang.srt.models.deepseek_v2", "DeepseekV2MLP.forward"
where = []

def patch(module):
    fn = module
    for part in NAME.split("."):
        fn = getattr(fn, part)
    lines, start = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, start - 1)
    definition = tree.body[0]
    definition.decorator_list = []
    body = definition.body
    first = 1 if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 0
    probe = ast.parse(PROBE).body[0]
    for node in ast.walk(probe):
        node.lineno = node.end_lineno = body[first].lineno
    body.insert(first, probe)
    scope = dict(vars(module))
    exec(compile(tree, fn.__code__.co_filename, "exec"), scope)
    fn.__code__ = scope[definition.name].__code__
    fn.__globals__["importlib"] = importlib
    where[:] = [fn.__code__.co_filename, body[first].lineno]

class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Hook())
(selection,) = PROVIDER.select({"model": True, "tokens": 16, **({"sglang_args": sys.argv[1]} if sys.argv[1] else {})})
found = map_regions(selection_builder(selection, "sm120"), device="sm120").cudagraphs
print("RESULT " + json.dumps({"where": where, "assumed": found.assumed, "phases": [
    {"phase": p.phase, "captures": [{"size": c.size, "error": c.error, "segments": c.segments,
     "breaks": [b.function for b in c.breaks], "hazards": [
        {"category": h.category, "file": h.site.file, "line": h.site.line, "function": h.site.function}
        for h in c.hazards]} for c in p.captures]} for p in found.phases]}))
"""


def _patched_map(launch: str) -> dict:
    result = subprocess.run([sys.executable, "-c", _PATCHED, launch], cwd=ROOT, capture_output=True, text=True,
                            timeout=900)
    line = next((x for x in result.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert result.returncode == 0 and line, result.stderr[-3000:]
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow
@pytest.mark.skipif(HAS_SGLANG and (not _has_breakable() or sglang_has_tc_piecewise()),
                    reason="the release has no breakable CUDA-graph prefill by default")
def test_an_item_in_sglangs_captured_code_is_found_at_its_line_and_not_when_run_eagerly():
    record = _patched_map("")
    file, line = record["where"]
    assert file.endswith("sglang/srt/models/deepseek_v2.py")
    phases = {p["phase"]: p for p in record["phases"]}
    for capture in phases["prefill"]["captures"]:
        assert capture["error"] == "", capture
        assert capture["hazards"] == [{"category": "cudagraph-sync", "file": file, "line": line,
                                       "function": "forward"}], capture
    # The decode capture is not breakable: the probe does not read there.
    assert all(c["hazards"] == [] and c["error"] == "" for c in phases["decode"]["captures"])
    # --debug-cuda-graph: SGLang runs the whole prefill forward as one
    # eager_on_graph call. GLM-5's DSA indexer is an eager_on_graph call of its
    # own inside it, which ends a segment no longer open: SGLang's capture
    # stops there, and the map says where.
    nested = _patched_map("--debug-cuda-graph")
    for capture in {p["phase"]: p for p in nested["phases"]}["prefill"]["captures"]:
        assert "breakable_cuda_graph.py" in capture["error"] and "_end_current_segment" in capture["error"], capture


# SGLang's own breakable capture and eager_on_graph, on a function of this
# test: a read inside the eager call runs between segments, one in the
# captured code does not.
_EAGER = r"""
import json, torch
from graphbreak_doctor.diagnose import inside_device
from graphbreak_doctor.cudagraph.recorder import Session
from graphbreak_doctor.emulation import standins
from graphbreak_doctor.targets.frameworks import registry
from graphbreak_doctor.targets.frameworks.sglang import emulation
with inside_device("sm120") as (dev, log):
    installed = registry.install_stand_ins(log)
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
        BreakableCUDAGraph, BreakableCUDAGraphCapture, eager_on_graph)
    import sglang.srt.model_executor.runner_backend_utils.weak_ref_tensor  # decided by platform at import
    standins.register_missing_fakes(installed)
    session = Session(log)
    lengths = torch.tensor([3, 5])

    @eager_on_graph
    def attention(q):
        return q * int(lengths.max())      # read at every replay: no hazard

    def forward(x):
        x = attention(x * 2)
        if lengths.min() > 1:              # read once, at capture
            x = x + 1
        return attention(x)

    x = torch.ones(4, device="cuda")
    with session.recording(4) as recorder:
        forward(x)
        graph = BreakableCUDAGraph()
        with BreakableCUDAGraphCapture(graph, pool=torch.cuda.graph_pool_handle(), stream=torch.cuda.Stream()):
            forward(x)
    done = recorder.done()
print("RESULT " + json.dumps({"segments": done.segments, "replayed": len(graph._segments),
                              "breaks": [(b.function, b.site.line) for b in done.breaks],
                              "hazards": [(h.category, h.site.code) for h in done.hazards]}))
"""


@pytest.mark.skipif(HAS_SGLANG and not _has_breakable(), reason="the release has no breakable CUDA-graph backend")
def test_a_read_in_an_eager_on_graph_call_is_no_hazard_and_one_between_them_is(tmp_path):
    script = tmp_path / "eager_capture.py"  # a file: its lines name the calls and the hazard
    script.write_text(_EAGER)
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    line = next((x for x in result.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert result.returncode == 0 and line, result.stderr[-3000:]
    record = json.loads(line[len("RESULT "):])
    assert record["segments"] == record["replayed"] == 3
    assert [name for name, _ in record["breaks"]] == ["attention"] * 2, record
    assert record["hazards"] == [["cudagraph-frozen-value", "if lengths.min() > 1:              # read once, at capture"]]

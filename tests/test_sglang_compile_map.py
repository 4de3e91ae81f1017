"""What an SGLang server compiles, read from SGLang itself: its launch
arguments parsed and resolved by the installed release (--sglang-args), the
torch.compile regions its GLM-5 forward enters per phase (found, never
listed), each traced with its own options. Runs in the SGLang environment
(`make test-sglang`); asserted by feature where releases differ."""

from __future__ import annotations

import importlib.util
import re
import tempfile
from pathlib import Path

import pytest

from conftest import sglang_has_tc_piecewise
from graphbreak_doctor.model import REGION_OK, Findings

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")]


def _run(cli, *args: str) -> tuple[int, Findings | None, str]:
    out = Path(tempfile.mkdtemp()) / "findings.json"
    result = cli("trace", *args, "--json", str(out), "--no-html", "--in-process")
    findings = Findings.from_json(out.read_text()) if out.exists() else None
    return result.returncode, findings, result.stderr


def _doctor_said(stderr: str) -> int:
    """How many lines the doctor itself wrote (SGLang's import chatter aside)."""
    return sum(1 for line in stderr.splitlines() if line.startswith("graphbreak-doctor:"))


_default: dict = {}


def default_map(cli) -> Findings:
    """`trace --model --mode fullgraph` with the default launch (traced once)."""
    if not _default:
        code, findings, stderr = _run(cli, "--model", "--mode", "fullgraph", "--forward", "decode",
                                      "--tokens", "16")
        assert code == 0 and findings is not None, stderr[-3000:]
        _default["findings"] = findings
    return _default["findings"]


@pytest.mark.skipif(HAS_SGLANG and sglang_has_tc_piecewise(), reason="the release still has tc_piecewise")
def test_piecewise_on_a_release_without_tc_piecewise_is_sglangs_own_refusal(cli):
    code, findings, stderr = _run(cli, "--model", "--mode", "piecewise")
    assert code == 2 and findings is None, stderr[-2000:]
    assert _doctor_said(stderr) == 1 and "tc_piecewise was removed" in stderr.strip().splitlines()[-1], stderr
    # The same refusal for the per-phase argument, and for a block traced piecewise.
    assert "tc_piecewise was removed" in _refusal({"layer": "moe", "impl": "sglang"}, "piecewise")
    assert "tc_piecewise was removed" in _refusal(
        {"layer": "dense", "impl": "sglang", "sglang_args": "--cuda-graph-backend-prefill tc_piecewise"}, "fullgraph")


def _refusal(options: dict, mode: str) -> str:
    """The one-line refusal of tracing PROVIDER.select(options) in ``mode``, in this process."""
    from graphbreak_doctor.diagnose import selection_builder, trace_mode
    from graphbreak_doctor.targets import TargetError
    from graphbreak_doctor.targets.serving import PROVIDER

    (selection,) = PROVIDER.select(options)
    with pytest.raises(TargetError) as refused:
        trace_mode(selection_builder(selection, "sm120"), mode, device="sm120")
    return str(refused.value)


def test_launch_arguments_sglang_rejects_are_one_line_with_its_message(cli):
    code, findings, stderr = _run(cli, "--layer", "dense", "--impl", "sglang", "--mode", "fullgraph",
                                  "--sglang-args", "--no-such-option 3")
    assert code == 2 and findings is None, stderr[-2000:]
    assert _doctor_said(stderr) == 1 and "unrecognized arguments: --no-such-option 3" in stderr, stderr[-2000:]
    for args, says in (("--tp-size two", "invalid int value: 'two'"),
                       ("--attention-backend no-such-backend", "invalid choice: 'no-such-backend'"),
                       ("--config server.yaml", "--config (a file of server arguments)")):
        refused = _refusal({"layer": "dense", "impl": "sglang", "sglang_args": args}, "fullgraph")
        assert says in refused and "\n" not in refused, refused


@pytest.mark.slow
def test_the_default_launch_compiles_only_the_helpers_its_phases_enter(cli):
    findings = default_map(cli)
    launch = findings.target.facts["launch"]
    assert launch["arguments"] == [] and "--quantization" in launch["command_line"]
    assert findings.modes == ["fullgraph"]
    entered = {r.function.rsplit(".", 1)[-1]: r for r in findings.regions if r.entered}
    registered = [r for r in findings.regions if not r.entered]
    # Importing SGLang registers the compile sites of every model it ships.
    assert len(registered) > 10, [r.function for r in findings.regions]
    topk = entered["_biased_grouped_topk_postprocess"]
    assert set(topk.calls) == {"extend", "decode"} and topk.options.get("dynamic") is True
    assert topk.traced == "explain" and topk.verdict == REGION_OK and topk.breaks == []
    assert "[16, 8]" in " ".join(topk.shapes["decode"])
    gate = entered["_get_logits_head_gate"]
    assert set(gate.calls) == {"decode"} and gate.options.get("dynamic") is True
    assert gate.verdict and gate.traced == "explain"
    if not sglang_has_tc_piecewise():
        assert "no torch.compile" in launch["phases"]["extend"], launch["phases"]
    assert not launch["resolved"].get("enable_torch_compile")


# Runs in a fresh interpreter: torch.compile must be recorded before SGLang is
# imported (the map's own worker is always a fresh process).
_DYNAMO_RECORD = """
import json
import torch._dynamo.utils as dynamo_utils
from graphbreak_doctor.compile_map import record_phases
from graphbreak_doctor.diagnose import device_context, selection_builder
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets.serving import PROVIDER

(selection,) = PROVIDER.select({"model": True, "tokens": 16})
with UndoLog() as state:
    state.keep_torch_state()
    state.keep_environment()
    with device_context("sm120"), UndoLog() as log:
        before = len(dynamo_utils._compilation_metrics)
        _, recorder = record_phases(selection_builder(selection, "sm120"), log)
        metrics = list(dynamo_utils._compilation_metrics)[before:]
print("RESULT " + json.dumps({
    "compiled": sorted({(m.co_filename, m.co_name) for m in metrics}),
    "listed": [(s.fn.__code__.co_filename, s.fn.__code__.co_name, list(s.fn.__code__.co_names))
               for s in recorder.entered()]}))
"""


@pytest.mark.slow
def test_the_map_is_the_regions_dynamo_itself_compiled():
    """Under the same set-up, the frames Dynamo compiled while the phases ran
    (its compilation metrics) are the regions the map lists, and the
    functions they call that Dynamo compiled as frames of their own (a
    region that captures no graph runs its callees under Dynamo)."""
    import subprocess
    import sys

    from conftest import ROOT

    result = subprocess.run([sys.executable, "-c", _DYNAMO_RECORD], cwd=ROOT, capture_output=True, text=True,
                            timeout=900)
    line = next((x for x in result.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert result.returncode == 0 and line, result.stderr[-3000:]
    import json

    record = json.loads(line[len("RESULT "):])
    compiled = {tuple(c) for c in record["compiled"] if not c[1].startswith("torch_dynamo_resume_in")}
    listed = {(file, name) for file, name, _ in record["listed"]}
    called = {name for _, _, names in record["listed"] for name in names}
    assert {name for _, name in listed} >= {"_biased_grouped_topk_postprocess", "_get_logits_head_gate"}
    assert listed <= compiled, (sorted(listed), sorted(compiled))
    assert all(name in called for _, name in compiled - listed), (sorted(compiled - listed), sorted(called))


@pytest.mark.slow
def test_enable_torch_compile_adds_the_decode_forward_at_sglangs_compile_sizes_and_the_gate_reads_it(cli, tmp_path):
    """--enable-torch-compile: SGLang's own compile sizes, settings and
    patch_model; the decode forward is one region, traced in SGLang's compile
    state. On releases whose DSA indexer has no pure-torch path the server's
    first compiled decode raises, and the gate fails on that region."""
    out = tmp_path / "map.json"
    result = cli("check", "--model", "--mode", "map", "--tokens", "16", "--sglang-args", "--enable-torch-compile",
                 "--json", str(out), "--junit", str(tmp_path / "gate.xml"), "--in-process")
    assert result.returncode in (0, 1) and out.exists(), result.stderr[-3000:]
    findings = Findings.from_json(out.read_text())
    assert findings.modes == ["map"]
    compiled = findings.target.facts["launch"]["decode_compile"]
    sizes = compiled["compile_bs"]
    assert sizes == sorted(sizes) and sizes[0] >= 1 and len(sizes) > 2, compiled
    assert compiled["traced_bs"] == [sizes[0], sizes[len(sizes) // 2], sizes[-1]]
    # SGLang's own setting, read after its set_torch_compile_config ran.
    assert compiled["recompile_limit"] > len(sizes)
    assert f"{len(sizes)} sizes" in findings.target.facts["launch"]["phases"]["decode"]
    (forward,) = [r for r in findings.regions if r.entered and r.function.endswith("ForCausalLM.forward")]
    assert set(forward.calls) == {"decode"} and forward.options.get("fullgraph") is not True
    assert forward.options.get("mode") == "max-autotune-no-cudagraphs" and forward.traced == "explain"
    gate = (tmp_path / "gate.xml").read_text()
    if any("Indexer has no native" in note for note in compiled["notes"]):
        # The server's first compile size stops in SGLang's own code: so does the map.
        assert forward.verdict == "crashed" and "Indexer has no native" in forward.error
        assert forward.shapes["decode"] == [f"[{sizes[0]}], [{sizes[0]}]"]
        assert result.returncode == 1 and "region sglang.srt.models" in gate and "<failure" in gate
        assert "ForCausalLM.forward" in result.stdout and "crashed" in result.stdout, result.stdout
    else:
        # Every traced size after the first recompiles (static shapes), with Dynamo's reason.
        assert [r["shapes"] for r in forward.recompiles] == [f"[{b}], [{b}]" for b in compiled["traced_bs"][1:]]
        assert all("size mismatch" in " ".join(r["reasons"]) for r in forward.recompiles), forward.recompiles


def _tc_piecewise_backend() -> bool:
    """Whether the installed SGLang's prefill runner is its tc_piecewise runner
    backend (0.5.19-0.5.21; 0.5.9 has its older PiecewiseCudaGraphRunner),
    read from its files (SGLang is imported only inside an emulated device)."""
    spec = importlib.util.find_spec("sglang")
    root = Path(spec.origin).parent / "srt" if spec is not None and spec.origin else None
    return root is not None and (root / "model_executor" / "runner_backend"
                                 / "tc_piecewise_cuda_graph_backend.py").exists()


@pytest.mark.skipif(not HAS_SGLANG or not sglang_has_tc_piecewise() or not _tc_piecewise_backend(),
                    reason="the release has no tc_piecewise prefill runner backend")
def test_a_tc_piecewise_launch_traces_the_prefill_forward_as_sglangs_runner_compiles_it(cli):
    """`--cuda-graph-backend-prefill tc_piecewise` (0.5.19-0.5.21): the map
    holds SGLang's own torch.compile of the model forward -- made by its
    install_torch_compiled in its tc_piecewise state, fullgraph=True with its
    piecewise backend -- entered by the extend phase and traced fullgraph,
    with the pieces its backend cuts the graph into at SGLang's split ops."""
    import importlib.metadata

    code, findings, stderr = _run(cli, "--model", "--mode", "map", "--tokens", "16", "--in-process",
                                  "--sglang-args", "--cuda-graph-backend-prefill tc_piecewise")
    assert code in (0, 1) and findings is not None, stderr[-3000:]
    launch = findings.target.facts["launch"]
    assert launch["arguments"] == ["--cuda-graph-backend-prefill", "tc_piecewise"]
    extend = launch["phases"]["extend"]
    assert "(fullgraph)" in extend and "install_torch_compiled" in extend, extend
    (region,) = [r for r in findings.regions if r.entered and r.options.get("fullgraph")]
    assert region.function.endswith("Model.forward") and region.site.file.endswith("models/deepseek_v2.py")
    assert str(region.options["backend"]).startswith("sglang.srt.compilation."), region.options
    assert set(region.calls) == {"extend"} and region.traced == "fullgraph" and region.traced_phase == "extend"
    # Driven as the runner compiles: the largest, a middle and the smallest of
    # SGLang's own capture sizes, the largest first (not the --tokens batch).
    sizes = [int(shape.split("]", 1)[0].lstrip("[")) for shape in region.shapes["extend"]]
    assert len(sizes) == 3 and sizes[0] > sizes[1] > sizes[2], region.shapes
    assert region.calls["extend"] == 3 and f"driven at {sizes[0]}, {sizes[1]}, {sizes[2]} tokens" in extend, extend
    assert "sglang::unified_sparse_attention_with_output" in region.split_ops, region.split_ops
    if region.verdict == REGION_OK:
        assert region.pieces > 1 and region.breaks == [], region
    else:
        # The first hard failure, as the server's own compile pass meets it.
        assert region.verdict == "fails" and region.pieces == 0 and region.breaks, region
        assert "compile pass stopped" in extend, extend
        first = region.breaks[0]
        if first.site.code.startswith("import torchada"):
            # SGLang's MUSA probe imports torch_musa's adapter; a CUDA server
            # has no such package (SGLang does not ask for it), so the import
            # fails there as here, and Dynamo cannot trace a failing import.
            assert first.gb_type == "Import failure" and first.site.function == "is_musa", first
            assert importlib.util.find_spec("torchada") is None
            assert not any(req.split()[0].lower().startswith("torchada")
                           for req in importlib.metadata.requires("sglang") or [])


def test_a_backend_sglang_refuses_on_the_device_is_its_own_check_exit_2(cli):
    """FlashAttention 3 on a B200: SGLang's backend asserts the device's
    capability when it is created, as the server does at start-up."""
    code, findings, stderr = _run(cli, "--model", "--model-path", "deepseek-v3", "--device", "sm100", "--mode", "map",
                                  "--sglang-args", "--attention-backend fa3")
    assert code == 2 and findings is None, stderr[-3000:]
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("graphbreak-doctor: error:")]
    assert re.search(r"error: SGLang [\w.]+ refuses this launch on the emulated NVIDIA B200: ", line), line
    assert "FlashAttention v3 Backend requires SM>=80 and SM<=90" in line, line
    assert re.search(r"\(its check at sglang/srt/layers/attention/\w+\.py:\d+ in \w+\)$", line), line

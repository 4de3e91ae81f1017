"""SGLang's own GLM-5 blocks (``trace --layer L --impl sglang``), run in the
SGLang environment (``make test-sglang``; skipped where SGLang is not installed).

What holds for every supported SGLang release is asserted by feature (does
the release wrap FlashInfer's quantization in its own op?), never by version
string; what one release gives is in the golden files, one per layer x device
x SGLang release (tests/test_glm5_golden.py says how they are rewritten):
    GRAPHBREAK_DOCTOR_UPDATE_GOLDEN=1 make test-sglang
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphbreak_doctor.model import Findings

from conftest import check_golden, golden_summary, sglang_has_tc_piecewise

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")]

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
SGLANG = importlib.metadata.version("sglang") if HAS_SGLANG else ""
DEVICES = ("sm120", "sm100", "sm90")

def traced(traces, layer: str, device: str = "sm120", mode: str = "both", *extra: str) -> tuple[int, Findings | None, str]:
    """(exit code, findings, stderr) of `trace --layer L --impl sglang` in a
    fresh process, as a user runs it; once per arguments (the session's traces)."""
    done = traces.get("--layer", layer, "--impl", "sglang", "--device", device, "--mode", mode, *extra)
    assert done.code in (0, 2, 3), done.stderr[-3000:]
    return done.code, done.findings, done.stderr


def ok(traces, *args: str) -> Findings:
    code, findings, stderr = traced(traces, *args)
    assert code == 0 and findings is not None, stderr[-3000:]
    return findings


def wraps_fp4_quantize() -> bool:
    """Whether this SGLang release calls FlashInfer's fp4_quantize through an op of its own."""
    # Read, not imported: SGLang is imported only inside an emulated device.
    home = Path(list(importlib.util.find_spec("sglang").submodule_search_locations)[0])
    return "flashinfer_fp4_quantize" in (home / "srt" / "layers" / "quantization" / "fp4_utils.py").read_text()


# ------------------------------------------------------------------ golden


@pytest.mark.slow
@pytest.mark.parametrize("layer,device", [(layer, device) for layer in ("dense", "moe") for device in DEVICES])
def test_golden(traces, layer, device):
    done = traces.get("--layer", layer, "--impl", "sglang", "--device", device, "--mode", "both")
    got = golden_summary(done)
    if done.findings is not None:
        got["registered_ops"] = done.findings.registered_ops()
    check_golden(GOLDEN / f"glm5-sglang-{layer}-{device}-sglang-{SGLANG}.json", got)


# ------------------------------------------------------------ what it finds


@pytest.mark.slow
def test_dense_sm120_verdict_and_why(traces):
    """A release that wraps fp4_quantize in its own op captures the dense block
    whole, and the report says which ops the library calls hide behind; an
    older one fails at FlashInfer's fp4_quantize JIT path (the user's story)."""
    from graphbreak_doctor.render import get

    findings = ok(traces, "dense")
    html = get("html").render(findings)
    text = get("terminal").render(findings)
    if wraps_fp4_quantize():
        assert findings.fullgraph.ok and findings.breaks == []
        for op in ("sglang::flashinfer_fp4_quantize", "sglang::fp4_gemm"):
            assert op in findings.registered_ops() and op in findings.target.opaque_ops
            assert op in html and op in text
        assert "Why it is clean" in html and "why it is clean" in text
        assert "JIT" in findings.target.opaque_ops["sglang::flashinfer_fp4_quantize"]
    else:
        first = findings.break_by_id(findings.fullgraph.break_id)
        assert findings.fullgraph.ok is False and first.category == "subprocess"
        assert first.package == "flashinfer" and first.actionable_frame.qualname == "get_cuda_version"
        assert any(f.function == "fp4_quantize" and "flashinfer" in f.file for f in first.stack)


@pytest.mark.slow
@pytest.mark.skipif(HAS_SGLANG and not sglang_has_tc_piecewise(),
                    reason="this SGLang release has no tc_piecewise runner (test_sglang_compile_map.py)")
def test_moe_is_clean_in_sglangs_piecewise_state_and_not_outside_it(traces):
    piecewise = ok(traces, "moe", "sm120", "piecewise")
    assert piecewise.fullgraph.ok and piecewise.breaks == []
    assert "tc_piecewise" in piecewise.target.facts["compile_state"]
    assert any(op.startswith("sglang::moe_forward") for op in piecewise.registered_ops())
    assert piecewise.target.split_ops and all("::" in op for op in piecewise.target.split_ops)
    # Plain: FlashInfer's fused MoE path breaks (explain mode may crash Dynamo
    # itself on an older FlashInfer: the run says so, the fullgraph verdict stands).
    _, plain, _ = traced(traces, "moe")
    assert plain.fullgraph.ok is False and plain.breaks
    assert {b.package for b in plain.breaks} == {"flashinfer"}, [b.package for b in plain.breaks]


@pytest.mark.slow
def test_findings_record_impl_release_state_warm_up_and_stand_ins(traces):
    from graphbreak_doctor.render import get

    (_, warm, _), (_, cold, _) = traced(traces, "moe"), traced(traces, "moe", "sm120", "explain", "--cold")
    for findings, warmed in ((warm, True), (cold, False)):
        info = findings.target
        assert info.facts["impl"] == "sglang" and info.facts["sglang_version"] == SGLANG
        assert info.facts["warm_up"] is warmed and info.facts["compile_state"] == "plain"
        assert info.facts["sglang_module"] == "sglang.srt.models.deepseek_v2.DeepseekV2MoE"
        assert findings.environment["sglang"] == SGLANG
        assert any(n.startswith(f"implementation: SGLang {SGLANG}'s own DeepseekV2MoE") for n in info.notes)
        assert any(("skipped (--cold)" in n) != warmed for n in info.notes if n.startswith("compile state"))
        assert info.stand_ins and info.facts["emulation"]
        html, text = get("html").render(findings), get("terminal").render(findings)
        for line in info.stand_ins:
            assert f"stand-in: {line}" in text and line.split(":", 1)[0] in html
    if warm.outcome == cold.outcome == "complete":
        # Without the warm-up, FlashInfer's module loading runs under Dynamo too.
        warm_explain = {b.key() for b in warm.breaks if "explain" in b.modes}
        assert warm_explain < {b.key() for b in cold.breaks}


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["dense", "moe"])
def test_a_plain_dynamo_script_finds_the_same_categories_and_frames(traces, tmp_path, layer):
    """fixtures.sglang_plain runs torch._dynamo.explain and
    torch.compile(fullgraph=True, backend="eager") on the same SGLang block,
    without the doctor's capture; its TORCH_TRACE, read by ingest, gives the
    live trace's categories and frames to change, every break reason explain
    lists is one the doctor found, and the fullgraph verdicts agree."""
    from graphbreak_doctor.ingest import ingest

    _, live, _ = traced(traces, layer)
    if live.outcome != "complete" or live.fullgraph.crashed:
        pytest.skip(f"Dynamo crashed on this release's {layer} block: {live.fullgraph.error}")
    env = {**os.environ, "TORCH_TRACE": str(tmp_path / "trace"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "fixtures.sglang_plain", "--layer", layer], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    plain = json.loads(done.stdout.strip().splitlines()[-1])
    assert plain["fullgraph"]["ok"] is live.fullgraph.ok
    frame = lambda f: (f.file, f.line)  # noqa: E731
    if not live.fullgraph.ok:
        last = plain["fullgraph"]["stack"][-1]
        assert frame(live.break_by_id(live.fullgraph.break_id).site) == (last["file"], last["line"])
    assert plain["explain"]["graph_break_count"] <= sum(b.count for b in live.breaks if "explain" in b.modes)
    sites = {frame(b.site) for b in live.breaks} | {frame(f) for b in live.breaks for f in b.stack}
    for reason in plain["explain"]["break_reasons"]:
        assert (reason["stack"][-1]["file"], reason["stack"][-1]["line"]) in sites, reason
    shape = lambda fs: sorted({(b.category, b.package, b.actionable_frame.qualname if b.actionable_frame else "")  # noqa: E731
                               for b in fs.breaks})
    assert shape(ingest([str(tmp_path / "trace")])) == shape(live)


# ------------------------------------------------------------- stand-ins


def test_stand_in_schemas_are_the_real_binaries_schemas():
    """The schemas declared for the CUDA-only binaries are the ones compiled
    into the installed binaries (read from the files, never loaded)."""
    from graphbreak_doctor.emulation import standins

    sgl_kernel = importlib.util.find_spec("sgl_kernel")
    binaries = sorted(Path(list(sgl_kernel.submodule_search_locations)[0]).glob("**/common_ops*.so"))
    assert binaries
    for binary in binaries:
        found = standins.binary_schemas(binary)
        assert found, binary
        for name, schema in found.items():
            assert standins.SGL_KERNEL_SCHEMAS[name] == schema, (binary, name)
    # torchvision's library keeps its schema strings in pieces (the compiler
    # stores them as immediates): its declarations start with ours.
    torchvision = importlib.util.find_spec("torchvision")
    (library,) = Path(list(torchvision.submodule_search_locations)[0]).glob("_C*.so")
    data = library.read_bytes()
    for schema in standins.TORCHVISION_SCHEMAS.values():
        opening = f"torchvision::{schema.split(' -> ')[0]}"[:56]
        assert opening.encode() in data, opening


# ---------------------------------------------------------------- undo


@pytest.mark.slow
def test_undo_is_complete_after_sglang_traces_in_this_process(monkeypatch, tmp_path):
    """Two SGLang traces in this process, each built afresh: every change the
    emulation, the stand-ins and SGLang's set-up made is undone after each,
    and nothing lands in the home folder's caches."""
    from test_emulation import _assert_same, _snapshot

    from graphbreak_doctor.diagnose import selection_builder, trace_mode
    from graphbreak_doctor.targets.glm5.provider import PROVIDER

    from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation

    # FlashInfer opens its JIT log in the home folder when imported (as far
    # as it imports without a device).
    flashinfer_emulation.import_on_this_machine()
    # The doctor's own cache folder (the model's host build of FlashInfer's
    # planner) stays where it is: the home folder checked is the traced code's.
    from graphbreak_doctor.cache import cache_root

    monkeypatch.setenv("GRAPHBREAK_DOCTOR_CACHE", str(cache_root()))
    monkeypatch.setenv("HOME", str(tmp_path))
    before = _snapshot()
    env = dict(os.environ)
    for layer, mode in (("dense", "fullgraph"), ("moe", "piecewise" if sglang_has_tc_piecewise() else "fullgraph")):
        (selection,) = PROVIDER.select({"layer": layer, "impl": "sglang"})
        findings = trace_mode(selection_builder(selection, "sm120"), mode, device="sm120")
        assert findings.fullgraph.ok is not None and not findings.fullgraph.crashed, findings.fullgraph.error
        _assert_same(dict(before), _snapshot())
        assert dict(os.environ) == env
    if sglang_has_tc_piecewise():
        # The tc_piecewise prefill's map: SGLang's install_torch_compiled sets
        # the model's forward and registers a Dynamo bytecode hook it keeps no
        # handle to; both are undone with the build.
        import torch._dynamo.convert_frame as convert_frame

        from graphbreak_doctor.compile_map import map_regions

        hooks = len(convert_frame._bytecode_hooks)
        (selection,) = PROVIDER.select({"model": True, "tokens": 16,
                                        "sglang_args": "--cuda-graph-backend-prefill tc_piecewise"})
        findings = map_regions(selection_builder(selection, "sm120"), device="sm120")
        assert any(r.entered and r.options.get("fullgraph") for r in findings.regions), findings.regions
        assert len(convert_frame._bytecode_hooks) == hooks
        _assert_same(dict(before), _snapshot())
        assert dict(os.environ) == env
    import torch

    assert torch.cuda.is_available() is False
    assert not any(tmp_path.rglob("*")), sorted(tmp_path.rglob("*"))[:5]


# -------------------------------------------------------- command line


def test_options_that_do_not_apply_are_usage_errors(cli):
    for argv, says in ((("--impl", "reference", "--cold"), "--cold applies to --impl sglang"),
                       (("--impl", "sglang", "--tp", "2"), "--tp applies to --impl reference")):
        result = cli("trace", "--layer", "dense", *argv, "--no-html")
        assert result.returncode == 2 and says in result.stderr


def test_default_impl_is_sglang_where_it_is_installed():
    from graphbreak_doctor.targets.glm5.provider import PROVIDER

    (selection,) = PROVIDER.select({"layer": "dense"})
    assert selection.options["impl"] == "sglang" and selection.spec == "glm5-sglang:dense:0"


def test_a_release_without_a_known_setup_api_is_one_line_and_exit_2():
    code = (
        "import sys\n"
        "from graphbreak_doctor.targets.glm5.sglang import runtime\n"
        "real = runtime._lookup\n"
        "gone = ('sglang.srt.runtime_context:publish', 'sglang.srt.server_args:set_global_server_args_for_scheduler')\n"
        "runtime._lookup = lambda path: None if path in gone else real(path)\n"
        "from graphbreak_doctor.cli import main\n"
        "sys.exit(main(['trace', '--layer', 'dense', '--impl', 'sglang', '--mode', 'fullgraph', '--in-process', "
        "'--no-html']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-2000:]
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("graphbreak-doctor: error:")]
    assert f"SGLang {SGLANG} cannot be built" in error
    assert "sglang.srt.runtime_context.publish" in error and "set_global_server_args_for_scheduler" in error

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
import re
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


# The schemas the traced SGLang paths call, as sgl-kernel's common_ops
# declares them (whitespace normalized): what the reader must find in the
# installed binary where it holds the op. moe_fused_gate and scaled_fp4_quant
# left the library in later releases (SGLang compiles them itself).
TRACED_SGL_KERNEL_OPS = {
    "fused_add_rmsnorm": "fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, bool enable_pdl) -> ()",
    "rmsnorm": "rmsnorm(Tensor! output, Tensor input, Tensor weight, float eps, bool enable_pdl) -> ()",
    "silu_and_mul": "silu_and_mul(Tensor! out, Tensor input) -> ()",
    "sgl_per_token_group_quant_8bit": "sgl_per_token_group_quant_8bit(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, float eps, float fp8_min, float fp8_max, bool scale_ue8m0) -> ()",
    "sgl_per_token_quant_fp8": "sgl_per_token_quant_fp8(Tensor input, Tensor! output_q, Tensor! output_s) -> ()",
    "fp8_scaled_mm": "fp8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, ScalarType out_dtype, Tensor? bias) -> Tensor",
    "moe_fused_gate": "moe_fused_gate(Tensor input, Tensor bias, int num_expert_group, int topk_group, int topk, int num_fused_shared_experts, float routed_scaling_factor, bool apply_routed_scaling_factor_on_output) -> (Tensor[])",
    "scaled_fp4_quant": "scaled_fp4_quant(Tensor! output, Tensor! input, Tensor! output_scale, Tensor! input_scale) -> ()",
    "fast_topk": "fast_topk(Tensor score, Tensor indices, Tensor lengths, Tensor? row_starts) -> ()",
    "fast_topk_transform_fused": "fast_topk_transform_fused(Tensor score, Tensor lengths, Tensor dst_page_table, Tensor src_page_table, Tensor cu_seqlens_q, Tensor? row_starts) -> ()",
    "fast_topk_transform_ragged_fused": "fast_topk_transform_ragged_fused(Tensor score, Tensor lengths, Tensor topk_indices_ragged, Tensor topk_indices_offset, Tensor ? row_starts) -> ()",
    "concat_mla_absorb_q": "concat_mla_absorb_q(Tensor a, Tensor b, Tensor! out) -> ()",
    "concat_mla_k": "concat_mla_k(Tensor! k, Tensor k_nope, Tensor k_rope) -> ()",
}
# Every release's library holds these.
ALWAYS_IN_COMMON_OPS = ("fused_add_rmsnorm", "rmsnorm", "silu_and_mul", "fp8_scaled_mm", "fast_topk")


def _package_file(package: str, pattern: str) -> list[Path]:
    spec = importlib.util.find_spec(package)
    if spec is None:
        return []
    return sorted(Path(list(spec.submodule_search_locations)[0]).glob(pattern))


def _common_ops() -> list[Path]:
    binaries = _package_file("sgl_kernel", "**/common_ops*.so")
    assert binaries, "sgl-kernel is installed without a common_ops library"
    return binaries


def _traced_ops_in(binary: Path) -> dict[str, str]:
    """The traced ops ``binary`` holds a schema string for, found without the
    reader: the bytes of a NUL and the op's name and parenthesis."""
    data = binary.read_bytes()
    return {name: schema for name, schema in TRACED_SGL_KERNEL_OPS.items() if b"\x00" + name.encode() + b"(" in data}


def _regex_reader(binary: Path) -> list[str]:
    """The reader the fast one replaced: one pattern over the whole file
    (seconds for a library of hundreds of MB). Strings that are not UTF-8 are
    left out, as the fast reader leaves them out."""
    pattern = re.compile(rb"(?<![A-Za-z0-9_])([a-z_0-9]+)\(([^\x00]*?)\) -> ([^\x00]*?)\x00")
    out = []
    for m in pattern.finditer(binary.read_bytes()):
        try:
            out.append(m.group(0)[:-1].decode())
        except UnicodeDecodeError:
            pass
    return out


def test_schema_reader_finds_the_traced_ops_in_the_installed_common_ops():
    """The schemas the traced paths need, read from the installed sgl-kernel
    binaries (each architecture's), equal to the library's own strings."""
    from graphbreak_doctor.emulation.standins import schemas_in

    for binary in _common_ops():
        held = _traced_ops_in(binary)
        assert set(ALWAYS_IN_COMMON_OPS) <= set(held), (binary, sorted(held))
        found = {text.split("(", 1)[0]: " ".join(text.split()) for text in schemas_in(binary)}
        for name, schema in held.items():
            assert found.get(name) == " ".join(schema.split()), (binary, name, found.get(name))
        # The whole library, not only the traced ops: a few dozen schemas at least.
        assert len(found) >= 30, (binary, len(found))


def test_schema_reader_is_fast_and_reads_each_binary_once():
    """A first read of common_ops takes a small part of what the pattern over
    the whole file takes (0.01 s against 0.6 s for 12 MB); a second read is
    the cached one."""
    import time

    from graphbreak_doctor.emulation.standins import schemas

    binary = max(_common_ops(), key=lambda p: p.stat().st_size)
    schemas._READ.clear()
    started = time.perf_counter()
    first = schemas.schemas_in(binary)
    fast = time.perf_counter() - started
    started = time.perf_counter()
    slow = _regex_reader(binary)
    slow_s = time.perf_counter() - started
    assert list(first) == slow
    assert fast < slow_s / 5, (fast, slow_s)
    assert schemas.schemas_in(binary) is first


# A generated library: schema strings in the places a binary holds them,
# and strings that look like schemas but are not.
_TRICKY = (
    b"first_op(int a) -> int\x00"  # at the file's start: no NUL before the name
    b"\x00\x00fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, bool enable_pdl) -> ()\x00"
    b"adjacent(Tensor x) -> Tensor\x00next_one() -> ()\x00"  # two strings, one NUL apart
    b"\x01\x02\x7fELF junk torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor\x00"
    b"usage: a -> b, (see the docs) -> here\x00"  # arrows in text, no schema
    b"map(x) ->missing space\x00"  # ") ->" without the space after
    b"Upper(Tensor a) -> ()\x00"  # not lower case: no schema
    b"Xname_tail(int a) -> ()\x00"  # the tail of a longer identifier
    b"outer(Tensor a) -> (Tensor b) -> ()\x00"  # two arrows in one string: one schema
    + b"A" * 200_000 + b" padded(int pad) -> int\x00"  # a long string before the name
    b"bad_utf8(Tensor \xff\xfe) -> ()\x00"  # not UTF-8: no schema
    b"moe_fused_gate(Tensor input, Tensor bias, int num_expert_group, int topk_group, int topk, "
    b"int num_fused_shared_experts, float routed_scaling_factor, bool apply_routed_scaling_factor_on_output)"
    b" -> (Tensor[])\x00"
    b"unterminated(int a) -> ()"  # the file's end, no NUL: no schema
)
_TRICKY_SCHEMAS = [
    "first_op(int a) -> int",
    TRACED_SGL_KERNEL_OPS["fused_add_rmsnorm"],
    "adjacent(Tensor x) -> Tensor",
    "next_one() -> ()",
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "outer(Tensor a) -> (Tensor b) -> ()",
    "padded(int pad) -> int",
    TRACED_SGL_KERNEL_OPS["moe_fused_gate"],
]


def test_schema_reader_reads_what_the_whole_file_pattern_reads(tmp_path):
    """The fast reader and the pattern over the whole file find the same
    strings: in a generated library with the tricky cases, and in the
    installed binaries small enough to scan the slow way."""
    from graphbreak_doctor.emulation.standins import schemas_in

    generated = tmp_path / "libgenerated.so"
    generated.write_bytes(_TRICKY)
    assert list(schemas_in(generated)) == _TRICKY_SCHEMAS == _regex_reader(generated)
    # A changed file is read again (same path, another size).
    generated.write_bytes(_TRICKY + b"\x00later(int a) -> ()\x00")
    assert list(schemas_in(generated)) == _TRICKY_SCHEMAS + ["unterminated(int a) -> ()", "later(int a) -> ()"]
    (tmp_path / "empty.so").write_bytes(b"")
    assert schemas_in(tmp_path / "empty.so") == ()
    small = [b for b in _package_file("torchvision", "_C*.so") + _common_ops()[:1]
             + _package_file("sgl_kernel", "spatial_ops*.so") if b.stat().st_size < 64_000_000]
    assert small
    for binary in small:
        assert list(schemas_in(binary)) == _regex_reader(binary), binary


def _sgl_kernel_stand_in_or_skip():
    import torch

    if torch.backends.cuda.is_built():
        pytest.skip("a CUDA build of torch loads the real common_ops")


def test_stand_in_declares_every_schema_common_ops_declares():
    """The stand-in declares the whole library, the traced ops included,
    each with the binary's schema; the ops that only write their arguments
    get a no-op fake after the framework's import; undoing removes them."""
    import torch

    from graphbreak_doctor.emulation import standins
    from graphbreak_doctor.emulation.standins.binaries import StandIns, declared
    from graphbreak_doctor.targets.frameworks.sglang.sgl_kernel_libs import install_sgl_kernel
    from graphbreak_doctor.patching import UndoLog

    _sgl_kernel_stand_in_or_skip()
    binary = _common_ops()[0]
    library = standins.schemas_in(binary)
    log, out = UndoLog(), StandIns()
    try:
        install_sgl_kernel(log, out)
        assert {f"sgl_kernel::{n}" for n in _traced_ops_in(binary)} <= set(out.declared)
        for text in library:
            name = text.split("(", 1)[0]
            op = getattr(torch.ops.sgl_kernel, name).default
            assert str(op._schema) == str(torch._C.parse_schema(f"sgl_kernel::{text}")), name
        standins.register_missing_fakes(out)
        assert any("no-op fake" in line for line in out.lines), out.lines
        with torch._subclasses.FakeTensorMode():
            x, residual, weight = (torch.empty(4, 8) for _ in range(3))
            assert torch.ops.sgl_kernel.fused_add_rmsnorm(x, residual, weight, 1e-6, False) is None
    finally:
        log.undo()
    assert not any(declared(qualname) for qualname in out.declared)


def test_stand_in_skips_a_schema_this_torch_cannot_parse(tmp_path):
    """A schema the installed torch refuses is left out with a line naming
    it; the others in the same binary are declared."""
    from graphbreak_doctor.emulation.standins.binaries import StandIns, declared
    from graphbreak_doctor.targets.frameworks.sglang.sgl_kernel_libs import declare_common_ops
    from graphbreak_doctor.patching import UndoLog

    binary = tmp_path / "common_ops.abi3.so"
    binary.write_bytes(b"\x00gbd_probe_ok(Tensor! out, Tensor input) -> ()\x00"
                       b"gbd_probe_unparsed(Tensor input, NoSuchType level) -> ()\x00"
                       b"gbd_probe_after(Tensor input) -> Tensor\x00")
    log, out = UndoLog(), StandIns()
    try:
        declare_common_ops(log, out, [binary])
        assert out.declared == ["sgl_kernel::gbd_probe_ok", "sgl_kernel::gbd_probe_after"]
        assert declared("sgl_kernel::gbd_probe_ok") and not declared("sgl_kernel::gbd_probe_unparsed")
        (line,) = out.lines
        assert line.startswith("sgl_kernel::{gbd_probe_unparsed}: not declared") and "unknown type" in line, line
    finally:
        log.undo()
    assert not declared("sgl_kernel::gbd_probe_ok")


# ---------------------------------------------------------------- undo


@pytest.mark.slow
def test_undo_is_complete_after_sglang_traces_in_this_process(monkeypatch, tmp_path):
    """Two SGLang traces in this process, each built afresh: every change the
    emulation, the stand-ins and SGLang's set-up made is undone after each,
    and nothing lands in the home folder's caches."""
    from test_emulation import _assert_same, _snapshot

    from graphbreak_doctor.diagnose import selection_builder, trace_mode
    from graphbreak_doctor.targets.serving import PROVIDER

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
    for argv, says in ((("--impl", "sglang", "--tp", "2"), "--tp applies to --impl reference"),):
        result = cli("trace", "--layer", "dense", *argv, "--no-html")
        assert result.returncode == 2 and says in result.stderr


def test_default_impl_is_sglang_where_it_is_installed():
    from graphbreak_doctor.targets.serving import PROVIDER

    (selection,) = PROVIDER.select({"layer": "dense"})
    assert selection.options["impl"] == "sglang" and selection.spec == "glm5-sglang:dense:0"


def test_a_release_without_a_known_setup_api_is_one_line_and_exit_2():
    code = (
        "import sys\n"
        "from graphbreak_doctor.targets.frameworks.sglang import release\n"
        "real = release._lookup\n"
        "gone = ('sglang.srt.runtime_context:publish', 'sglang.srt.server_args:set_global_server_args_for_scheduler')\n"
        "release._lookup = lambda path: None if path in gone else real(path)\n"
        "from graphbreak_doctor.cli import main\n"
        "sys.exit(main(['trace', '--layer', 'dense', '--impl', 'sglang', '--mode', 'fullgraph', '--in-process', "
        "'--no-html']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-2000:]
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("graphbreak-doctor: error:")]
    assert f"SGLang {SGLANG} cannot be built" in error
    assert "sglang.srt.runtime_context.publish" in error and "set_global_server_args_for_scheduler" in error

"""The fix ladder: real Dynamo re-traces over real FlashInfer (emulated sm120)
and over the pure-PyTorch fixtures on real CPU tensors."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import sys
from dataclasses import dataclass

import pytest
import torch

from graphbreak_doctor.diagnose import device_context, target_builder
from graphbreak_doctor.model import Findings
from graphbreak_doctor.fix import FixSession, fix
from graphbreak_doctor.patching import OP_NAMESPACE

# The installed FlashInfer's version, read without importing it: some
# releases (0.6.18, SGLang 0.5.21's pin) ask the CUDA device for its SM count
# at import, which only the emulated device answers on this machine.
try:
    FLASHINFER = importlib.metadata.version("flashinfer-python")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - both test environments install it
    FLASHINFER = ""

FP4_WRAPPER = "fixtures.flashinfer_targets:fp4_quantize_wrapper"


def _steps(findings: Findings) -> list[tuple[str, str, str]]:
    return [(r.category, r.recipe, r.result) for r in findings.ladder]


# ------------------------------------------------------------ FlashInfer


def _attribute_snapshot(prefixes: tuple[str, ...]) -> dict[tuple[str, str], int]:
    snap = {}
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(prefixes):
            for attr, value in list(vars(module).items()):
                snap[(name, attr)] = id(value)
    return snap


@dataclass
class LadderRun:
    """One fix() of FlashInfer's FP4 wrapper and what the process looked like
    before and right after it."""

    findings: Findings
    before: dict
    after: dict
    originals: tuple
    restored: tuple
    mtimes: dict
    mtimes_after: dict
    ops_left: list


@pytest.fixture(scope="module")
def fp4_ladder() -> LadderRun:
    """The ladder on FlashInfer's FP4 wrapper, run once per environment: the
    version's own ladder and the undo are checked on the same run. Cold (no
    warm-up): the user's story is a fresh process's first call, where
    FlashInfer's JIT loader also probes the file system."""
    import flashinfer
    import flashinfer.jit.cpp_ext as cpp_ext
    from torch._library import custom_ops

    with device_context("sm120"):
        import fixtures.flashinfer_targets  # noqa: F401  (imported before the snapshot)
    files = {m.__file__ for n, m in list(sys.modules.items()) if n.startswith("flashinfer") and getattr(m, "__file__", None)}
    mtimes = {f: os.stat(f).st_mtime_ns for f in files}
    before = _attribute_snapshot(("flashinfer", "fixtures"))
    originals = (flashinfer.fp4_quantize, cpp_ext.get_cuda_version)
    findings = fix(target_builder(FP4_WRAPPER), device="sm120", cold=True)
    return LadderRun(findings, before, _attribute_snapshot(("flashinfer", "fixtures")), originals,
                     (flashinfer.fp4_quantize, cpp_ext.get_cuda_version), mtimes,
                     {f: os.stat(f).st_mtime_ns for f in files},
                     [q for q in custom_ops.OPDEFS if q.startswith(OP_NAMESPACE + "::")])


@pytest.mark.flashinfer_version
@pytest.mark.skipif(not FLASHINFER.startswith("0.6."), reason="the user's story is on flashinfer 0.6.x")
def test_user_story_ladder_on_flashinfer_063(fp4_ladder):
    """The user's story on a cold process (CUDA_HOME set, tests/conftest.py):
    each JIT probe is a break. Hoisting the nvcc probe moves the fullgraph
    failure on to the file-system probe, which explain mode never reached
    before it: a new break, so no progress, undone. The disable is the trap;
    the custom op removes every break at once."""
    findings = fp4_ladder.findings
    assert _steps(findings) == [
        ("subprocess", "hoist-subprocess", "rejected"),
        ("subprocess", "compiler-disable", "rejected"),
        ("subprocess", "wrap-custom-op", "fullgraph ok"),
    ]
    hoist, trap, custom = findings.ladder
    assert hoist.where == "flashinfer/jit/cpp_ext.py:get_cuda_version"
    assert ("The first failure moved, but it brings 1 new break (Attempted to call function marked as skipped "
            "at pathlib.py:") in hoist.detail, hoist.detail
    assert "Skip calling `torch.compiler.disable()`d function" in trap.detail
    assert "Explain mode (fullgraph=False) runs" in trap.detail
    assert "torch.compiler.disable(flashinfer.fp4_quantize)" in trap.patch
    assert "@torch.library.custom_op" in custom.patch and "register_fake" in custom.patch
    assert "matches the 1 warm-up call(s)" in custom.detail  # catalogue fake == eager shapes
    assert "Breaks (explain) 4 -> 0; operators in graphs 33% -> 100%" in custom.detail, custom.detail
    assert findings.fix.ok is True
    assert findings.fix.recipes == ["wrap-custom-op"]
    # The verdict describes the target as it is; every rung's break is in the findings.
    assert findings.fullgraph.ok is False
    assert all(findings.break_by_id(r.break_id) is not None for r in findings.ladder)


@pytest.mark.flashinfer_version
@pytest.mark.skipif(not FLASHINFER.startswith("0.7."), reason="torch.ops.flashinfer.fp4_quantize exists from 0.7")
def test_registered_op_ladder_on_flashinfer_07x(fp4_ladder):
    findings = fp4_ladder.findings
    assert _steps(findings) == [("subprocess", "use-registered-op", "fullgraph ok")]
    assert findings.fix.recipes == ["use-registered-op"]
    assert "torch.ops.flashinfer.fp4_quantize(" in findings.ladder[0].patch


@pytest.mark.flashinfer_version
def test_catalogue_fake_matches_flashinfer_under_fake_tensors():
    """The fp4_quantize fake gives the shapes the installed FlashInfer gives."""
    import flashinfer

    from graphbreak_doctor.recipes.catalogue import fp4_quantize_fake

    with device_context("sm120"):
        for m, k, swizzled in ((128, 256, True), (7, 96, True), (33, 64, False)):
            x = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
            s = torch.empty(1, dtype=torch.float32, device="cuda")
            try:
                real = flashinfer.fp4_quantize(x, s, sf_vec_size=16, is_sf_swizzled_layout=swizzled)
            except RuntimeError:  # 0.6.x cannot reshape swizzled scales when K/16 % 4 != 0
                with pytest.raises(RuntimeError):
                    fp4_quantize_fake(x, sf_vec_size=16, is_sf_swizzled_layout=swizzled)
                continue
            fake = fp4_quantize_fake(x, sf_vec_size=16, is_sf_swizzled_layout=swizzled)
            assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in real], (m, k, swizzled)


@pytest.mark.flashinfer_version
def test_every_patch_is_undone_and_nothing_on_disk_changes(fp4_ladder):
    assert fp4_ladder.findings.fix.ok and len(fp4_ladder.findings.ladder) >= 1
    before, after = fp4_ladder.before, fp4_ladder.after
    changed = sorted(k for k in before if k in after and after[k] != before[k] and k[1] != "__warningregistry__")
    assert changed == []
    assert fp4_ladder.restored == fp4_ladder.originals
    assert fp4_ladder.mtimes_after == fp4_ladder.mtimes
    # Temporary ops are removed from the dispatcher again.
    assert fp4_ladder.ops_left == []


@pytest.mark.flashinfer_version
@pytest.mark.slow
def test_glm5_dense_layer_ladder_ends_with_fullgraph_ok():
    from graphbreak_doctor.targets.models import glm5

    cfg = glm5.load_config(None)
    # Cold, as the user's story: a warm-up first takes the file-system probe away on 0.6.3.
    findings = fix(lambda _log: glm5.build_layer("dense", config=cfg, tokens=128, device="sm120"), device="sm120",
                   cold=True)
    steps = _steps(findings)
    assert findings.fix.ok is True, findings.fix
    assert steps[-1][2] == "fullgraph ok"
    assert ("compiler-disable", "rejected") in [(r, res) for _, r, res in steps]
    if FLASHINFER.startswith("0.6."):
        assert [c for c, _, _ in steps][:2] == ["subprocess", "filesystem"]
        assert [r for _, r, _ in steps] == ["hoist-subprocess", "hoist-filesystem", "compiler-disable",
                                            "wrap-custom-op", "hoist-filesystem", "wrap-custom-op"]
    else:
        assert [r for _, r, _ in steps] == ["use-registered-op", "compiler-disable", "wrap-custom-op"]


# ---------------------------------------------------- pure-PyTorch fixtures

FIXABLE = ["subprocess_call", "filesystem_exists", "filesystem_pathstat", "builtin_namespace", "opaque_ctypes",
           "compiler_disable", "cached_classmethod"]


@pytest.mark.parametrize("name", FIXABLE)
def test_fixed_function_gives_eager_outputs(name):
    module = importlib.import_module(f"fixtures.breaks.{name}")
    fn, args = module.target()
    expected = fn(*args)
    from graphbreak_doctor.targets import Target, TargetInfo

    target = Target(fn, tuple(args), {}, TargetInfo(spec=name))
    with FixSession(target) as session:
        outcome = session.climb()
        assert outcome.ok, outcome.stopped
        assert outcome.rungs and outcome.rungs[-1].result == "fullgraph ok"
        compiled = torch.compile(fn, fullgraph=True, backend="eager")
        got = compiled(*args)
        torch._dynamo.reset()
    assert torch.equal(got, expected)
    assert outcome.outputs_equal is True
    # And afterwards the module is as it was: fullgraph fails again.
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(fn, fullgraph=True, backend="eager")(*args)
    torch._dynamo.reset()


@pytest.mark.parametrize("name,category", [("data_dependent", "data-dependent"),
                                           ("builtin_datetime", "unsupported-builtin")])
def test_no_recipe_in_the_traced_function_itself(name, category):
    findings = fix(target_builder(f"fixtures.breaks.{name}:target"), device="cpu")
    assert findings.ladder == []
    assert findings.fix.ok is False
    assert findings.fix.stopped.startswith(f"no recipe applies to the [{category}] break")


_LOGS_WHAT_IT_FOUND = """\
import importlib.util
import logging

import torch

logger = logging.getLogger(__name__)


def kernels_available() -> bool:
    found = importlib.util.find_spec("json") is not None
    logger.debug("optional kernels available: %s", found)
    return found


def layer(x):
    return x * 2 if kernels_available() else x


def target():
    return layer, (torch.ones(4),)
"""


def test_a_check_that_logs_what_it_found_runs_once_before_capture(tmp_path, monkeypatch):
    """A log call in a function that takes and returns no tensors (a package
    availability check): the function is answered from a warm-up."""
    (tmp_path / "logs_what_it_found.py").write_text(_LOGS_WHAT_IT_FOUND)
    monkeypatch.syspath_prepend(str(tmp_path))
    findings = fix(target_builder("logs_what_it_found:target"), device="cpu")
    assert _steps(findings) == [("logging", "hoist-call", "fullgraph ok")], findings.fix.stopped
    assert findings.fix.ok and findings.fix.outputs_equal_eager
    sys.modules.pop("logs_what_it_found", None)


_SIZE_CHECK_THAT_LOGS = """\
import logging

import torch

logger = logging.getLogger(__name__)


def num_buckets(n: int) -> int:
    logger.warning("using buckets for %d rows", n)
    return max(1, n // 4)


def layer(x):
    return x.reshape(num_buckets(x.shape[0]), -1).sum(0)


def target():
    x = torch.randn(16, 3)
    torch._dynamo.mark_dynamic(x, 0)
    return layer, (x,)
"""


def test_a_change_that_brings_a_break_of_its_own_is_undone(tmp_path, monkeypatch):
    """The logging check takes a dynamic size: answered from a warm-up at
    one size, the lookup itself breaks while tracing (the first failure
    moved, into the change). That is no progress: the rung is rejected, and
    the next one -- Dynamo told to skip the Logger call -- holds."""
    (tmp_path / "size_check_that_logs.py").write_text(_SIZE_CHECK_THAT_LOGS)
    monkeypatch.syspath_prepend(str(tmp_path))
    findings = fix(target_builder("size_check_that_logs:target"), device="cpu")
    assert _steps(findings) == [("logging", "hoist-call", "rejected"),
                                ("logging", "ignore-logging-call", "fullgraph ok")], findings.fix.stopped
    assert "it brings 1 new break" in findings.ladder[0].detail
    assert "warm-up of num_buckets" in findings.ladder[0].detail
    assert "Breaks (explain) 1 -> 0" in findings.ladder[1].detail
    assert findings.fix.ok and findings.fix.outputs_equal_eager
    assert [(c.kind, c.module, c.function) for c in findings.fix.changes] == [
        ("config", "torch._dynamo.config", "ignore_logging_functions")]
    # Undone afterwards: the process's Dynamo traces Logger calls as before.
    assert not torch._dynamo.config.ignore_logging_functions
    sys.modules.pop("size_check_that_logs", None)


def test_a_logger_call_is_skipped_while_compiling_and_print_is_left_to_a_person():
    findings = fix(target_builder("fixtures.breaks.logging_calls:target"), device="cpu")
    assert _steps(findings) == [("logging", "ignore-logging-call", "next failure")], findings.fix.stopped
    assert "torch._dynamo.config.ignore_logging_functions.add(logging.Logger.warning)" in findings.ladder[0].patch
    # print (line 14) is no Logger method: the switch does not apply there.
    assert findings.fix.stopped.startswith("no recipe applies to the [logging] break at "
                                           "fixtures/breaks/logging_calls.py:14"), findings.fix.stopped
    assert "ignore-logging-call: not a break Dynamo names this switch for (GB0291)" in findings.fix.stopped


_TAGGER = """\
import torch


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


def target():
    torch.manual_seed(0)
    return Tagger().eval(), (torch.randn(2, 5, 8),)
"""


def test_an_lstm_gets_the_switch_dynamo_names_and_gives_eagers_outputs(tmp_path, monkeypatch):
    (tmp_path / "lstm_tagger.py").write_text(_TAGGER)
    monkeypatch.syspath_prepend(str(tmp_path))
    findings = fix(target_builder("lstm_tagger:target"), device="cpu")
    assert _steps(findings) == [("other", "allow-rnn", "fullgraph ok")], findings.fix.stopped
    assert findings.fix.ok and findings.fix.outputs_equal_eager
    assert [(c.kind, c.function) for c in findings.fix.changes] == [("config", "allow_rnn")]
    assert torch._dynamo.config.allow_rnn is False  # undone
    sys.modules.pop("lstm_tagger", None)


_COUNTS_ITS_CALLS = """\
import logging

import torch

logger = logging.getLogger(__name__)
_SEEN = []


def parity() -> int:
    _SEEN.append(1)
    logger.debug("call %d", len(_SEEN))
    return 1 + len(_SEEN) % 2


def layer(x):
    return x * parity()


def target():
    return layer, (torch.ones(4),)
"""


def test_a_change_whose_capture_gives_other_outputs_is_undone(tmp_path, monkeypatch):
    """parity() takes no tensors but is no pure function: answered from a
    warm-up, the captured graph multiplies by the warm-up's answer, not by
    the one eager gives now. Fullgraph captures it; the outputs say no."""
    (tmp_path / "counts_its_calls.py").write_text(_COUNTS_ITS_CALLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    findings = fix(target_builder("counts_its_calls:target"), device="cpu")
    first = findings.ladder[0]
    assert (first.category, first.recipe, first.result) == ("logging", "hoist-call", "rejected"), first.detail
    assert "Fullgraph captures it, but the compiled outputs differ from eager outputs; change undone." in first.detail
    assert "hoist-call" not in findings.fix.recipes
    sys.modules.pop("counts_its_calls", None)


def _prints_between(x):
    y = x * 2
    print("between")
    return y.sum() + 1


def _stops_dynamo_then_prints(x):
    y = x * 2
    torch._dynamo.mark_static_address(y)  # Dynamo refuses to trace this call
    print("between")
    return y.sum() + 1


def test_a_state_that_runs_the_forward_outside_the_graphs_is_no_progress():
    """Real explain traces of the same work. Under Dynamo's suppress_errors
    a frame Dynamo cannot trace runs eagerly: no break is left, and the
    graphs hold none of the operators. The ladder's rule calls that no
    progress; one graph holding them all is."""
    from graphbreak_doctor.analysis.assemble import stopped_at
    from graphbreak_doctor.capture.trace import trace
    from graphbreak_doctor.fix.ladder import Progress
    from graphbreak_doctor.patching import UndoLog
    from graphbreak_doctor.targets import Target

    x = torch.ones(4)
    traced = Progress.of(trace(Target(_prints_between, (x,)), "explain", decompile=False, count_ops=True))
    with UndoLog() as log:
        log.set_option(torch._dynamo.config, "suppress_errors", True)
        hidden = Progress.of(trace(Target(_stops_dynamo_then_prints, (x,)), "explain", decompile=False, count_ops=True))
    assert len(traced.breaks) == 1 and (traced.held, traced.total) == (3, 3)
    assert hidden.breaks == {} and (hidden.held, hidden.total) == (0, 3)
    fixed = stopped_at(trace(Target(_prints_between, (x,)), "fullgraph", decompile=False))
    assert hidden.worse_than(traced, fixed) == \
        "the compiled graphs hold a smaller share of the operators (100% -> 0%)"
    assert Progress({}, 3, 3).worse_than(traced, fixed) == ""
    assert traced.worse_than(traced, fixed).startswith("the breaks an explain trace counts did not fall")


def test_step_limit():
    findings = fix(target_builder("fixtures.breaks.compiler_disable:target"), device="cpu", max_steps=0)
    assert findings.ladder == [] and "step limit (0)" in findings.fix.stopped


def test_cli_fix_json(cli, tmp_path):
    out = tmp_path / "fix.json"
    proc = cli("fix", "--target", "fixtures.breaks.subprocess_call:target", "--device", "cpu", "--json", str(out), "--no-html",
               "--in-process")
    assert proc.returncode == 0, proc.stderr
    assert "1. [subprocess]" in proc.stdout and "hoist-subprocess -> FULLGRAPH OK" in proc.stdout
    assert "verdict: fullgraph OK after 1 change(s): hoist-subprocess" in proc.stdout
    findings = Findings.from_json(out.read_text())
    assert [(r.category, r.recipe, r.result) for r in findings.ladder] == [("subprocess", "hoist-subprocess", "fullgraph ok")]
    assert findings.ladder[0].where == "fixtures/breaks/subprocess_call.py:probe_version"
    assert json.loads(out.read_text())["fix"]["outputs_equal_eager"] is True


def test_cli_fix_rejects_explain_mode(cli):
    proc = cli("fix", "--target", "fixtures.breaks.subprocess_call:target", "--device", "cpu", "--mode", "explain")
    assert proc.returncode == 2 and "fix climbs fullgraph failures" in proc.stderr

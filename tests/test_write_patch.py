"""`fix --write-patch DIR`: the ladder's changes written as a diff and a
standalone package, checked in fresh processes loaded with PYTHONPATH=DIR,
on the real FlashInfer of each test environment (emulated sm120)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, other_flashinfer_python, run_cli
from graphbreak_doctor.model import Findings
from graphbreak_doctor.model.loader import build

FLASHINFER = importlib.metadata.version("flashinfer-python")
FP4_WRAPPER = "fixtures.flashinfer_targets:fp4_quantize_wrapper"
SIZES = (16, 48, 128, 512)

pytestmark = pytest.mark.flashinfer_version


@dataclass
class Written:
    proc: subprocess.CompletedProcess
    folder: Path
    findings: Findings


def _findings(path: Path) -> Findings:
    return build(Findings, json.loads(path.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Written:
    """One `fix --write-patch` of FlashInfer's FP4 wrapper at four server sizes."""
    tmp = tmp_path_factory.mktemp("write-patch")
    folder, out = tmp / "patch", tmp / "fix.json"
    # Cold: the patch then covers a fresh process's first call too (FlashInfer
    # 0.6.3's file-system probe, which a warm-up takes away).
    proc = run_cli("fix", "--target", FP4_WRAPPER, "--device", "sm120", "--sizes", ",".join(map(str, SIZES)),
                   "--cold", "--write-patch", str(folder), "--json", str(out), "--html", str(tmp / "fix.html"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Written(proc, folder, _findings(out))


def test_the_report_offers_the_written_patch(written):
    """The HTML report's fix ladder opens with the patch: where it is, how it
    held, how to load it, and the diff, folded."""
    import html

    page = (written.folder.parent / "fix.html").read_text(encoding="utf-8")
    section = page[page.index('id="written-patch"'):page.index('<ol class="ladder">')]
    assert written.findings.fix.patch.summary in html.unescape(section)
    assert f"PYTHONPATH={written.folder}" in section
    assert "<details><summary>The diff" in section
    assert html.escape(written.findings.fix.patch.diff_text.splitlines()[0]) in section
    assert 'href="#written-patch"' in page


def _python(code: str, folder: Path, python: str = sys.executable, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A fresh interpreter with only the patch folder on PYTHONPATH (not this checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(folder)
    return subprocess.run([python, "-c", code], cwd=cwd or folder.parent, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_patch_holds_in_fresh_processes_at_the_servers_sizes(written):
    fix = written.findings.fix
    patch = fix.patch
    assert fix.ok and patch is not None
    assert patch.verified, patch.summary
    assert [c.size for c in patch.checks] == [16, 128, 512]  # the smallest, a middle and the largest
    assert all(c.ok and c.outcome == "fullgraph ok" for c in patch.checks)
    # The user's program ran too, on the emulated GPU's fake tensors: shapes compared, not values.
    assert all("fake tensors have no values" in c.program for c in patch.checks), [c.program for c in patch.checks]
    assert patch.summary.startswith("verified: fresh process, sizes 16, 128, 512: fullgraph ok; the user's program: ")
    assert patch.sizes == list(SIZES) and patch.sizes_from == "--sizes"
    assert patch.versions == {"flashinfer-python": FLASHINFER}
    readme = (written.folder / "README.txt").read_text(encoding="utf-8")
    assert "Checked: verified: fresh process, sizes 16, 128, 512: fullgraph ok" in readme
    assert f"Proven on: flashinfer-python {FLASHINFER}" in readme
    assert "patch -p1 -R" in readme  # how to take it out
    assert "verified: fresh process, sizes 16, 128, 512: fullgraph ok" in written.proc.stdout


def test_without_the_patch_the_original_failure_stays(written):
    """The ladder's first trace is the target as it is: FlashInfer's JIT
    probe (subprocess on 0.6.3 and 0.7.4 alike) stops fullgraph."""
    findings = written.findings
    assert findings.fullgraph.ok is False
    first = next(b for b in findings.breaks if b.id == findings.fullgraph.break_id)
    assert first.category == "subprocess"


def test_each_kept_change_is_written_and_says_for_which_sizes_it_holds(written):
    fix = written.findings.fix
    kept = [r for r in written.findings.ladder if r.result != "rejected"]
    assert [c.step for c in fix.changes] == [r.step for r in kept]
    assert all(c.block and not c.why_not for c in fix.changes)
    by_recipe = {c.recipe: c for c in fix.changes}
    if FLASHINFER.startswith("0.6."):
        # The JIT loader's hoists move the first failure without lowering the
        # breaks explain counts: undone (tests/test_fix_ladder.py); the
        # custom op is the one change kept.
        assert set(by_recipe) == {"wrap-custom-op"}
        assert by_recipe["wrap-custom-op"].kind == "custom_op"
    else:
        assert set(by_recipe) == {"use-registered-op"}
        assert by_recipe["use-registered-op"].kind == "registered_op"


def test_the_diff_applies_to_a_clean_copy_and_gives_fullgraph(written, tmp_path):
    """The diff's form of the same changes: `patch -p1` on a copy of the
    installed package (files linked, the patched ones copied), imported in
    place of the installed one, traces fullgraph OK without the package."""
    import importlib.util

    diff = written.folder / written.findings.fix.patch.diff
    installed = Path(importlib.util.find_spec("flashinfer").origin).parent
    root = tmp_path / "site"
    shutil.copytree(installed, root / "flashinfer", copy_function=os.symlink)
    for line in diff.read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ b/"):
            target = root / line[len("+++ b/"):]
            target.unlink()
            shutil.copyfile(installed.parent / line[len("+++ b/"):], target)
    dry = subprocess.run(["patch", "-p1", "--dry-run", "-i", str(diff)], cwd=root, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    subprocess.run(["patch", "-p1", "-i", str(diff)], cwd=root, check=True, capture_output=True)
    out = tmp_path / "trace.json"
    proc = run_cli("trace", "--target", FP4_WRAPPER, "--device", "sm120", "--mode", "fullgraph", "--json", str(out),
                   "--no-html", env={"PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _findings(out).fullgraph.ok is True


def test_the_package_is_standalone_and_idempotent(written):
    code = (
        "import sys, graphbreak_doctor_patch as p\n"
        "import flashinfer\n"
        "p.install(); p.install()\n"
        "assert 'graphbreak_doctor' not in sys.modules, 'the package imported the doctor'\n"
        "print(sorted(set(p.STATE['applied'])), len(p.STATE['applied']))\n"
    )
    proc = _python(code, written.folder)
    assert proc.returncode == 0, proc.stderr
    modules = sorted({c.module for c in written.findings.fix.changes})
    assert proc.stdout.strip() == f"{modules} {len(modules)}"
    assert proc.stderr == ""


def test_sitecustomize_loads_it_in_every_python_process(written):
    """A server's spawned processes inherit PYTHONPATH: each one loads the patch."""
    code = ("import multiprocessing as mp\n"
            "def child(q):\n"
            "    import sys; q.put('graphbreak_doctor_patch' in sys.modules)\n"
            "if __name__ == '__main__':\n"
            "    ctx = mp.get_context('spawn'); q = ctx.Queue(); p = ctx.Process(target=child, args=(q,))\n"
            "    p.start(); print(q.get()); p.join()\n")
    script = written.folder.parent / "spawn_check.py"
    script.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(script)], env={**env, "PYTHONPATH": str(written.folder)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_another_flashinfer_version_gets_one_line_and_goes_on_unpatched(written):
    other = other_flashinfer_python()
    # `make -j2` may still be building the other environment (it is complete
    # once the Makefile touched .installed): the stage that runs second always
    # finds the first one's.
    if other is None or not (other.parents[1] / ".installed").exists():
        pytest.skip("the other FlashInfer test environment is not built")
    code = ("import flashinfer, graphbreak_doctor_patch as p\n"
            "import flashinfer.jit.cpp_ext as c\n"
            "print(p.STATE['applied'], hasattr(c, '__graphbreak_doctor_patch__'))\n")
    proc = _python(code, written.folder, python=str(other))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    other_version = subprocess.run([str(other), "-c", "import importlib.metadata as m; "
                                    "print(m.version('flashinfer-python'))"], capture_output=True, text=True).stdout.strip()
    assert lines[0].startswith("graphbreak_doctor_patch: proven on flashinfer-python ")
    assert FLASHINFER in lines[0] and other_version in lines[0] and "unpatched" in lines[0]
    assert proc.stdout.strip() == "[] False"


def test_a_module_file_that_changed_is_left_alone(written, tmp_path):
    copy = tmp_path / "patch"
    shutil.copytree(written.folder, copy)
    manifest = copy / "graphbreak_doctor_patch" / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    changed = next(iter(data["modules"]))
    data["modules"][changed]["sha256"] = "0" * 64
    manifest.write_text(json.dumps(data), encoding="utf-8")
    proc = _python(f"import {changed}, graphbreak_doctor_patch as p; print({changed!r} in p.STATE['applied'])", copy)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    assert f"graphbreak_doctor_patch: {changed} not patched: " in proc.stderr
    assert "is not the file the patch was proven on" in proc.stderr


def test_write_patch_refuses_site_packages_and_foreign_folders(tmp_path):
    import site

    inside = Path(site.getsitepackages()[0]) / "graphbreak-doctor-patch-test"
    proc = run_cli("fix", "--target", FP4_WRAPPER, "--device", "sm120", "--write-patch", str(inside), "--no-html")
    assert proc.returncode == 2 and not inside.exists()
    assert "where packages are imported from" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine", encoding="utf-8")
    proc = run_cli("fix", "--target", FP4_WRAPPER, "--device", "sm120", "--write-patch", str(foreign), "--no-html")
    assert proc.returncode == 2 and "holds no earlier patch" in proc.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    proc = run_cli("fix", "--target", FP4_WRAPPER, "--device", "sm120", "--sizes", "4,8", "--no-html")
    assert proc.returncode == 2 and "--sizes applies to --write-patch" in proc.stderr


# ------------------------------------------- code the project has not seen

TILELIB = '''"""A library whose helper picks a tile per row count, probing the file
system each time (as a JIT cache lookup does)."""
import os


def _pick_tile(rows):
    os.stat(os.path.dirname(os.path.abspath(__file__)))
    return 32 if rows <= 32 else 128


def scale(x):
    return x * (1.0 / _pick_tile(x.shape[0]))
'''

SIZED_TARGET = '''import torch

import tilelib


def target(size: int = 48):
    def fn(x):
        return tilelib.scale(x) + 1
    return fn, (torch.randn(size, 64),)
'''

UNSEEN_FLASHINFER = '''import torch


def rmsnorm(size: int = 64):
    import flashinfer

    def fn(x, w):
        return flashinfer.norm.rmsnorm(x, w, eps=1e-6)
    return fn, (torch.empty(size, 512, dtype=torch.bfloat16, device="cuda"),
                torch.empty(512, dtype=torch.bfloat16, device="cuda"))
'''


def _fix_here(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, Findings, Path]:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    folder, out = tmp_path / "patch", tmp_path / "fix.json"
    proc = run_cli("fix", *args, "--write-patch", str(folder), "--json", str(out), "--no-html", cwd=tmp_path)
    assert out.exists(), proc.stderr[-3000:]
    return proc, _findings(out), folder


def test_a_warm_up_keyed_on_the_size_gives_way_to_an_op_that_holds_at_every_size(tmp_path):
    """`_pick_tile(rows)` answers per size: a warm-up at one size would fall
    through at the others. The ladder sees the calls change across the
    server's sizes and takes the custom op (its fake learned every size)."""
    proc, findings, folder = _fix_here(tmp_path, {"tilelib.py": TILELIB, "sized_target.py": SIZED_TARGET},
                                       "--target", "sized_target:target", "--device", "cpu", "--sizes", "16,48,128")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rung,) = findings.ladder
    assert (rung.category, rung.recipe, rung.result) == ("filesystem", "wrap-custom-op", "fullgraph ok")
    assert "preferred over hoist-filesystem (the calls _pick_tile(48), _pick_tile(16), _pick_tile(128)," in rung.detail
    assert "its calls change with the size" in rung.detail
    assert "compiled outputs equal eager outputs" in rung.detail
    (change,) = findings.fix.changes
    assert change.kind == "custom_op" and "at each of the server's 3 sizes" in change.holds
    assert findings.fix.patch.summary.startswith("verified: fresh process, sizes 16, 48, 128: fullgraph ok; the user's program: ")
    readme = (folder / "README.txt").read_text(encoding="utf-8")
    assert "wrap-custom-op: tilelib.scale" in readme and "holds for: the input shapes" in readme


def test_a_cached_classmethod_the_traced_line_calls_answers_from_a_warm_up(tmp_path):
    """A library's capability query, a classmethod cached with functools.cache
    and called through its platform object (Dynamo cannot enter the cache's C
    wrapper): the class's method answers from a warm-up, in the ladder and in
    the written patch, which replaces it on its class in its own module."""
    folder, out = tmp_path / "patch", tmp_path / "fix.json"
    proc = run_cli("fix", "--target", "fixtures.breaks.cached_classmethod:target", "--device", "cpu",
                   "--write-patch", str(folder), "--json", str(out), "--no-html")
    assert proc.returncode == 0, proc.stderr[-3000:]
    findings = _findings(out)
    (rung,) = findings.ladder
    assert (rung.category, rung.recipe, rung.result) == ("unsupported-builtin", "hoist-call", "fullgraph ok")
    assert rung.where.endswith("platform_query.py:Platform.vector_width"), rung.where
    (change,) = findings.fix.changes
    assert (change.kind, change.function) == ("memo", "Platform.vector_width")
    assert change.module == "fixtures.platform_query"
    assert findings.fix.patch.summary.startswith("verified: fresh process, the target's own size: fullgraph ok; "
                                                 "the user's program: ")
    diff = next(folder.glob("*.patch")).read_text(encoding="utf-8")
    assert "+++ b/fixtures/platform_query.py" in diff
    assert "+++ b/fixtures/breaks/cached_classmethod.py" not in diff
    assert "+Platform.vector_width = _graphbreak_doctor_1_Platform_vector_width()" in diff


def test_unseen_flashinfer_code_fresh_process_equals_the_ladder(tmp_path):
    """FlashInfer's RMSNorm: no fixture, no catalogue entry. Its inferred fake
    and JIT-module hoists hold in fresh processes exactly as in the ladder."""
    proc, findings, _folder = _fix_here(tmp_path, {"unseen_targets.py": UNSEEN_FLASHINFER},
                                        "--target", "unseen_targets:rmsnorm", "--device", "sm120", "--sizes", "8,64,512")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert findings.fix.ok
    assert findings.fix.patch.verified
    assert [c.outcome for c in findings.fix.patch.checks] == ["fullgraph ok"] * 3
    assert any(c.kind == "custom_op" and c.function == "rmsnorm" for c in findings.fix.changes)


def _one_change_written_and_proven(findings: Findings, folder: Path, kept: tuple[str, str, str]) -> None:
    """The ladder kept one change, (kind, module, function); the patch was
    proven in a fresh process, and its diff appends to that module's file."""
    (change,) = findings.fix.changes
    assert (change.kind, change.module, change.function) == kept
    assert findings.fix.patch.summary.startswith("verified: fresh process")
    diff = next(folder.glob("*.patch")).read_text(encoding="utf-8")
    assert f"+++ b/{change.module.replace('.', '/')}.py" in diff


STATIC_CACHE = '''\
import torch


class Block(torch.nn.Module):
    def forward(self, x):
        cache = x * 2
        # Meant for before compiling; torch forbids it in a graph.
        torch._dynamo.mark_static_address(cache)
        return cache.sum(-1) + 1


def target():
    return Block(), (torch.ones(4, 8),)
'''


def test_a_call_torch_forbids_in_a_graph_runs_only_outside_compile(tmp_path):
    """`torch._dynamo.mark_static_address` in a forward stops Dynamo with an
    AssertionError in every mode. It is a forbidden-call failure, not a
    crash, and its rung makes the function do nothing under compile: in the
    ladder, and in the written patch, which replaces it in torch's module."""
    proc, findings, folder = _fix_here(tmp_path, {"static_cache.py": STATIC_CACHE},
                                       "--target", "static_cache:target", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert findings.fullgraph.break_id and not findings.fullgraph.crashed
    (rung,) = findings.ladder
    assert (rung.category, rung.recipe, rung.result) == ("forbidden-call", "skip-when-compiling", "fullgraph ok")
    assert "if not torch.compiler.is_compiling():" in rung.patch
    assert "rebound torch._dynamo.mark_static_address, torch._dynamo.decorators.mark_static_address" in rung.detail
    assert findings.fix.outputs_equal_eager
    _one_change_written_and_proven(findings, folder, ("outside_compile", "torch._dynamo.decorators",
                                                      "mark_static_address"))
    # Loaded as a server loads it, eager calls still mark the tensor.
    proc = _python("import torch\n"
                   "t = torch.ones(2)\n"
                   "torch._dynamo.mark_static_address(t)\n"
                   "print(getattr(t, '_dynamo_static_input_type', None), "
                   "hasattr(torch._dynamo.mark_static_address, '__wrapped__'))\n", folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["unguarded", "True"]


CHECKED_MERGE = '''\
import torch


def merge(text, image):
    tokens, features = int((text > 0).sum()), image.shape[0]
    # The message's closure holds counts read from a tensor: Dynamo cannot
    # turn it into a function it can call later.
    torch._check(tokens >= features, lambda: f"{tokens} image tokens, {features} features")
    return text.float().sum() + image.sum()


def forward(text, image):
    return merge(text, image) * 2


def target():
    return forward, (torch.ones(6, dtype=torch.long), torch.ones(3, 4))
'''


def test_a_check_whose_message_dynamo_cannot_convert_keeps_the_check_and_loses_the_message(tmp_path):
    """`torch._check(cond, lambda: f"{count}...")` with a count read from a
    tensor stops Dynamo (GB9158, category `other`). The rung keeps the check
    and passes no message under torch.compile: in the ladder, and in the
    written patch, which defines `merge` again from its own source with the
    check without its message under torch.compiler.is_compiling(); outside
    torch.compile a failing check still says the caller's message."""
    proc, findings, folder = _fix_here(tmp_path, {"checked_merge.py": CHECKED_MERGE},
                                       "--target", "checked_merge:target", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rung,) = findings.ladder
    assert (rung.category, rung.recipe, rung.result) == ("other", "check-without-message", "fullgraph ok")
    assert "+    torch._check(tokens >= features) if torch.compiler.is_compiling() else torch._check(" in rung.patch
    assert findings.fix.outputs_equal_eager
    _one_change_written_and_proven(findings, folder, ("rewrite", "checked_merge", "merge"))
    # Loaded as a server loads it: the rewritten merge; outside torch.compile
    # a failing check still says the caller's message.
    proc = _python("import torch, checked_merge\n"
                   "print('is_compiling' in checked_merge.merge.__code__.co_names)\n"
                   "try:\n"
                   "    checked_merge.merge(torch.zeros(6, dtype=torch.long), torch.ones(3, 4))\n"
                   "except RuntimeError as e:\n"
                   "    print(e)\n", folder, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "0", "image", "tokens,", "3", "features"]


LOGS_THE_SIZE = '''\
import logging

import torch

logger = logging.getLogger(__name__)


def layer(x):
    logger.info("layer sees %d rows", x.shape[0])
    return torch.nn.functional.gelu(x) * 2


def target():
    return layer, (torch.randn(6, 4),)
'''


def test_a_dynamo_switch_is_written_into_torchs_config_and_holds_in_a_fresh_process(tmp_path):
    """A Logger call in the traced function itself: the switch that makes
    Dynamo skip it is set, in the written patch, in torch._dynamo.config
    right after torch imports it."""
    proc, findings, folder = _fix_here(tmp_path, {"logs_the_size.py": LOGS_THE_SIZE},
                                       "--target", "logs_the_size:target", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rung,) = findings.ladder
    assert (rung.category, rung.recipe, rung.result) == ("logging", "ignore-logging-call", "fullgraph ok")
    _one_change_written_and_proven(findings, folder, ("config", "torch._dynamo.config", "ignore_logging_functions"))
    proc = _python("import logging, torch\n"
                   "print(logging.Logger.info in torch._dynamo.config.ignore_logging_functions)\n", folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"]


SIZE_DEPENDENT = '''\
import subprocess
import sys

import torch


def toolkit() -> str:
    return subprocess.check_output([sys.executable, "--version"], text=True)


def layer(x):
    y = x * len(toolkit())
    if x.shape[0] > 64:
        print("a large batch")
    return y


def target(size=16):
    return layer, (torch.ones(size, 4),)
'''


def test_a_patch_its_fresh_process_check_does_not_prove_is_never_written(tmp_path):
    """Proven at the target's own size, the hoist reaches fullgraph; at one
    of the server's sizes the code takes a branch that prints. The check at
    that size fails, so nothing is written (exit 1), and the findings say
    why."""
    proc, findings, folder = _fix_here(tmp_path, {"size_dependent.py": SIZE_DEPENDENT},
                                       "--target", "size_dependent:target", "--device", "cpu", "--sizes", "16,128")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert findings.fix.ok and [r.recipe for r in findings.ladder] == ["hoist-subprocess"]
    patch = findings.fix.patch
    assert not patch.verified and patch.summary.startswith("NOT verified: fresh process"), patch.summary
    assert [c.ok for c in patch.checks] == [True, False], patch.checks
    assert "--write-patch: nothing written: the patch does not hold in a fresh process" in proc.stderr
    assert "patch not written to" in proc.stdout
    assert not folder.exists() and not list(tmp_path.glob(".patch-*"))

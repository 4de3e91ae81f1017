"""A written hoist holds whatever the process does after loading it: a
`torch._dynamo.reset()` between compiles (a test suite between cases, a
server that compiles again, the doctor's own fresh-process check) empties
Dynamo's compile-start callbacks, which the hoist's warm-up runs from; the
written block joins them again each time (fix/emit.py).

Real runs: `fix --write-patch` on a fixture whose function runs a child
process on every call, then the user's own program -- a plain
`torch.compile(fn, fullgraph=True)`, `torch._dynamo.reset()`, the same
compile again, outputs compared with eager -- in fresh interpreters that
load the patch from PYTHONPATH alone; and the same program with the block's
rejoining taken out, which must fail as the doctor's check then says.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

TARGET = "fixtures.breaks.subprocess_call:target"
# A probe whose answer changes per call: its hoist freezes one answer.
VARIES = "fixtures.breaks.subprocess_varies:target"
REJOIN = "    callback_handler.clear = _clear_and_rejoin\n"

# The user's program: eager once, then twice a reset and a fullgraph compile.
PROGRAM = """
import torch
from {module} import target
fn, args = target()
expected = fn(*args)
for attempt in ("first compile", "second compile"):
    torch._dynamo.reset()  # as a test suite does before each case
    try:
        got = torch.compile(fn, fullgraph=True, backend="eager")(*args)
    except torch._dynamo.exc.Unsupported as e:
        raise SystemExit(f"{{attempt}}: fullgraph failed: {{str(e).splitlines()[0]}}")
    if not torch.equal(got, expected):
        raise SystemExit(f"{{attempt}}: outputs differ from eager")
print("fullgraph ok twice, outputs equal eager")
"""


def _write(tmp: Path, target: str, code: int) -> tuple[Path, dict]:
    folder, out = tmp / "patch", tmp / "fix.json"
    done = run_cli("fix", "--target", target, "--device", "cpu", "--write-patch", str(folder), "--json", str(out),
                   "--no-html")
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    return folder, json.loads(out.read_text())


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    return _write(tmp_path_factory.mktemp("patch-reset"), TARGET, 0)


def _program(folder: Path | None, target: str = TARGET) -> subprocess.CompletedProcess:
    """The user's program in a fresh interpreter: the patch folder (when
    given) first on PYTHONPATH, then where the user's module lives."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in (folder, ROOT) if p is not None])
    program = PROGRAM.format(module=target.partition(":")[0])
    return subprocess.run([sys.executable, "-c", program], cwd=folder.parent if folder else ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_doctor_verifies_the_hoist_in_a_fresh_process(written):
    _folder, findings = written
    patch = findings["fix"]["patch"]
    assert [c["recipe"] for c in findings["fix"]["changes"]] == ["hoist-subprocess"]
    assert patch["verified"], patch["summary"]
    assert patch["summary"] == ("verified: fresh process, the target's own size: fullgraph ok; the user's program: "
                                "eager, then a plain torch.compile(fullgraph=True), and again after "
                                "torch._dynamo.reset(): ok; outputs equal eager")
    (check,) = patch["checks"]
    assert check["ok"] and check["outcome"] == "fullgraph ok" and "outputs equal eager" in check["program"]


def test_a_plain_compile_holds_after_torch_dynamo_reset(written):
    folder, _findings = written
    done = _program(folder)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fullgraph ok twice, outputs equal eager" in done.stdout


def test_without_the_patch_and_without_its_rejoining_the_program_fails(written, tmp_path):
    folder, _findings = written
    unpatched = _program(None)
    assert unpatched.returncode != 0 and "first compile: fullgraph failed" in unpatched.stderr, unpatched.stderr
    # The block as it was written before it rejoined: a reset between loading
    # the patch and the first compile leaves the warm-up out, and the compile
    # fails -- as the doctor's check, which resets before it compiles, said.
    copy = tmp_path / "patch"
    shutil.copytree(folder, copy)
    (block,) = (copy / "graphbreak_doctor_patch" / "blocks").glob("*.py")
    text = block.read_text()
    assert REJOIN in text
    block.write_text(text.replace(REJOIN, ""))
    manifest = copy / "graphbreak_doctor_patch" / "manifest.json"
    data = json.loads(manifest.read_text())
    (entry,) = data["modules"].values()
    entry["block_sha256"] = hashlib.sha256(block.read_bytes()).hexdigest()  # as if written so
    manifest.write_text(json.dumps(data))
    stale = _program(copy)
    assert stale.returncode != 0, stale.stdout + stale.stderr
    assert "first compile: fullgraph failed" in stale.stderr, stale.stderr[-2000:]


def test_a_change_that_changes_what_the_function_gives_is_never_written(tmp_path):
    """The other direction: the hoist of a probe whose answer changes per
    call compiles with fullgraph, but the compiled function gives the
    warm-up's answer where eager gives a new one. The ladder compares the
    outputs and undoes it; nothing is written, and the user's program
    fails as before."""
    folder, findings = _write(tmp_path, VARIES, 1)
    (rung,) = findings["ladder"]
    assert rung["recipe"] == "hoist-subprocess" and rung["result"] == "rejected", rung
    assert "compiled outputs differ from eager outputs; change undone" in rung["detail"]
    assert findings["fix"]["patch"] is None and not folder.exists()
    done = _program(None, VARIES)
    assert done.returncode != 0 and "fullgraph failed" in done.stderr, done.stdout + done.stderr

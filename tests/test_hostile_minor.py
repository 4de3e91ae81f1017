"""The fifth hostile round's minor failures (item 9), each a real run of the
command line (in this process, or in processes of its own where signals,
kills or two runs at once are the case):

1. ``trace --torch ''`` (or blank) is a usage error (exit 2, one line), not
   silently the installed torch.
2. An ingest whose only report lies past the 1 MiB line cut says so: the
   summary's "nothing found" and the gates' "nothing to gate" name the cut,
   the file and the line.
3. SIGTERM after ``fix --write-patch`` moved the verified patch into place:
   the patch is kept and the one line says so, and where (exit 143), never
   "nothing written".
4. Two ``baseline write`` runs into the same file at once: both entries land
   (the file is read, updated and replaced under a lock beside it, read
   again after the trace; no lock file is left).
5. A killed run's log folder (``graphbreak-doctor-logs-*``) is removed by the
   next run; a live run's is left alone. So is the folder ``matrix --torch
   release`` downloads a release's wheel into (``graphbreak-doctor-pin-*``).
6. ``matrix`` with 500 releases (or too many cells) is refused before any
   environment or lock file is made (exit 2, one line naming the limit); an
   environment build that fails, or is stopped by SIGTERM, leaves no lock
   file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from hostile_material import (blocked_on_fifo, graph_break_log, main, make_findings, one_error_line, start_doctor,
                              wait_for, write_findings)
from graphbreak_doctor.model import TargetInfo
from test_hostile_processes import _matrix_build, scratch  # noqa: F401 (scratch: a fixture)
from test_write_patch import TILELIB


def _finish(process: subprocess.Popen, timeout: float = 300) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


# A factory that says it started, then waits: for the file GO (a test lets it
# go on), or a long time (a test kills it).
WAITING_TARGET = '''import os
import time
from pathlib import Path

import torch


def factory():
    print("the waiting target was built")
    Path(os.environ["MARKER"]).touch()
    go = os.environ.get("GO")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (go and Path(go).exists()):
        time.sleep(0.05)
    return (lambda x: x * 2), (torch.ones(4),)
'''


# ------------------------------------------------------------ 1. --torch ''


def test_an_empty_torch_is_a_usage_error(capsys):
    for given in ("", "   "):
        code, out, err = main(capsys, "trace", "--target", "fixtures.breaks.clean:target", "--device", "cpu",
                              "--in-process", "--no-html", "--torch", given)
        assert code == 2, out + err
        line = one_error_line(err)
        assert line.startswith("graphbreak-doctor: error: ") and "--torch" in line and "version" in line, line
        assert not out  # nothing was traced


# --------------------------------------------------- 2. past the line cut


def test_a_report_past_the_line_cut_is_named_where_nothing_is_found(tmp_path, capsys):
    log = tmp_path / "long-line.log"
    # Line 2 runs 3 MiB before the report; only its first 1 MiB is read.
    log.write_text("server starting\n" + "x" * (3 << 20) + " " + graph_break_log(1).replace("\n", "\r"))
    code, out, _err = main(capsys, "ingest", log, "--no-html")
    assert code == 0
    (said,) = [ln for ln in out.splitlines() if ln.startswith("nothing found")]
    assert "1 MiB" in said and f"{log} line 2" in said, said
    for argv in (("check", "--from", log), ("baseline", "write", "--from", log, "-o", tmp_path / "b.json"),
                 ("diff", write_findings(tmp_path / "a.json", make_findings(1)), log, "--fail-on-new")):
        code, out, err = main(capsys, *argv)
        line = one_error_line(err)
        assert code == 5 and "no Dynamo report" in line, (argv, err)
        assert "1 MiB line cut" in line and f"{log} line 2" in line, (argv, line)
    # A log that merely has a long line, and its report on lines of their own: read, nothing said of a cut.
    fine = tmp_path / "fine.log"
    fine.write_text("x" * (2 << 20) + "\n" + graph_break_log(1))
    code, out, _err = main(capsys, "ingest", fine, "--no-html")
    assert code == 0 and "model_0.py:10" in out and "nothing found" not in out


# ---------------------------------- 3. a signal after the patch moved in

PATCHED_TARGET = '''import torch

import tilelib


def target(size: int = 48):
    print("the patched target was built")  # its log is kept beside the outputs
    def fn(x):
        return tilelib.scale(x) + 1
    return fn, (torch.randn(size, 64),)
'''


def test_sigterm_after_the_patch_moved_in_keeps_it_and_says_so(tmp_path, scratch):
    (tmp_path / "tilelib.py").write_text(TILELIB)
    (tmp_path / "patched_target.py").write_text(PATCHED_TARGET)
    # The log beside fix.json is a FIFO nobody reads: the doctor waits there
    # -- after the outputs and the patch, which come first -- and the signal
    # reaches it at that moment.
    os.mkfifo(tmp_path / "fix.log")
    process = start_doctor("fix", "--target", "patched_target:target", "--device", "cpu", "--no-html",
                           "--json", "fix.json", "--write-patch", "patch", tmp=scratch, cwd=tmp_path,
                           env={"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    try:
        wait_for(lambda: (tmp_path / "patch").is_dir() and blocked_on_fifo(process.pid), 300,
                 "the doctor to keep its log", process)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGTERM)
    finally:
        _out, err = _finish(process, 60)
    assert process.returncode == 143, err[-3000:]
    line = one_error_line(err)
    assert line == ("graphbreak-doctor: interrupted: SIGTERM received after the patch was written and verified: "
                    "patch (kept); stopped"), line
    findings = json.loads((tmp_path / "fix.json").read_text())
    assert findings["fix"]["patch"]["verified"]
    assert (tmp_path / "patch" / "graphbreak_doctor_patch" / "manifest.json").is_file()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".patch-")]


# ------------------------------------------- 4. two baseline writes at once


def _baseline_targets(path: Path) -> list[str]:
    return [t["target"] for t in json.loads(path.read_text())["targets"]]


def test_two_baseline_writes_at_once_both_land(tmp_path, scratch):
    """One run traces (and reads the file before it does); the other writes
    its entry meanwhile; then the first writes: both entries are there."""
    (tmp_path / "waiting_target.py").write_text(WAITING_TARGET)
    baseline, marker, go = tmp_path / "b.json", tmp_path / "built", tmp_path / "go"
    other = write_findings(tmp_path / "other.json", make_findings(
        1, target=TargetInfo(spec="app.other:target", provider="factory", title="app.other:target")))
    tracing = start_doctor("baseline", "write", "--target", "waiting_target:factory", "--device", "cpu",
                           "--mode", "explain", "--in-process", "-o", baseline, tmp=scratch, cwd=tmp_path,
                           env={"MARKER": str(marker), "GO": str(go),
                                "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    try:
        wait_for(marker.exists, 180, "the traced target to be built", tracing)
        assert tracing.poll() is None, tracing.communicate()
        reading = start_doctor("baseline", "write", "--from", other, "-o", baseline, tmp=scratch, cwd=tmp_path)
        _out, err = _finish(reading)
        assert reading.returncode == 0, err
        assert _baseline_targets(baseline) == ["app.other:target"]
        go.touch()
        _out, err = _finish(tracing)
    finally:
        go.touch()
        _finish(tracing)
    assert tracing.returncode == 0, err
    assert _baseline_targets(baseline) == ["app.other:target", "waiting_target:factory"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_many_baseline_writes_at_once_all_land(tmp_path, scratch):
    baseline = tmp_path / "b.json"
    names = [f"app.model_{i}:target" for i in range(6)]
    inputs = [write_findings(tmp_path / f"in-{i}.json", make_findings(
        1, target=TargetInfo(spec=name, provider="factory", title=name))) for i, name in enumerate(names)]
    processes = [start_doctor("baseline", "write", "--from", path, "-o", baseline, tmp=scratch, cwd=tmp_path)
                 for path in inputs]
    for process in processes:
        _out, err = _finish(process)
        assert process.returncode == 0, err
    assert _baseline_targets(baseline) == sorted(names)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# ------------------------------------------------ 5. a killed run's logs


def test_the_next_run_removes_a_killed_runs_log_folder_not_a_live_ones(tmp_path, scratch):
    (tmp_path / "waiting_target.py").write_text(WAITING_TARGET)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    runs = []
    try:
        for name in ("alive", "killed"):  # the second run's start sweeps too: the live run's folder stays
            marker = tmp_path / f"{name}-built"
            before = set(scratch.glob("graphbreak-doctor-logs-*"))
            process = start_doctor("trace", "--target", "waiting_target:factory", "--device", "cpu", "--mode",
                                   "explain", "--in-process", "--no-html", tmp=scratch, cwd=tmp_path,
                                   env={**env, "MARKER": str(marker)})
            runs.append(process)
            wait_for(marker.exists, 180, f"the {name} run's target", process)
            assert process.poll() is None, process.communicate()
            (folder,) = set(scratch.glob("graphbreak-doctor-logs-*")) - before
            if name == "killed":
                killed = folder
                process.kill()
                process.communicate(timeout=60)
            else:
                alive = folder
        assert killed.is_dir() and alive.is_dir(), "a killed run cannot remove its log folder"
        nxt = start_doctor("trace", "--target", "fixtures.breaks.clean:target", "--device", "cpu", "--mode",
                           "explain", "--in-process", "--no-html", tmp=scratch, cwd=tmp_path)
        out, err = _finish(nxt)
        assert nxt.returncode == 0, out + err
        assert not killed.exists(), "the next run left the killed run's log folder"
        assert alive.is_dir() and any(alive.iterdir()), "the next run removed a live run's log folder"
    finally:
        for process in runs:
            process.kill()
            process.communicate()


def test_a_killed_runs_wheel_download_folder_is_swept_too(scratch):
    """`matrix --torch release` reads each release's torch pin from its wheel,
    downloaded into a folder of its own (graphbreak-doctor-pin-*)."""
    from graphbreak_doctor.jobs import lifetime

    code = ("import sys, time; from graphbreak_doctor.jobs import lifetime; "
            "held = lifetime.owned_folder('graphbreak-doctor-pin-', dir=sys.argv[1]); held.__enter__(); "
            "print('ready', flush=True); time.sleep(300)")
    owner = subprocess.Popen([sys.executable, "-c", code, str(scratch)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert owner.stdout.readline() == "ready\n"
        (folder,) = scratch.glob("graphbreak-doctor-pin-*")
        assert lifetime.sweep_temp(scratch) == [] and folder.is_dir(), "its owner lives"
        owner.kill()
        owner.wait(timeout=60)
        assert lifetime.sweep_temp(scratch) == [folder] and not folder.exists()
    finally:
        owner.kill()
        owner.communicate()


# ----------------------------------------------- 6. the matrix's size, locks


def test_a_matrix_of_500_releases_is_refused_before_anything_is_made(tmp_path, capsys):
    envs = tmp_path / "envs"
    releases = ",".join(f"0.{i}.0" for i in range(500))
    code, out, err = main(capsys, "matrix", "--model", "--vllm", releases, "--envs", envs, "--no-json", "--no-html")
    line = one_error_line(err)
    assert code == 2 and "--vllm" in line and "at most 16 releases" in line and "500" in line, line
    # Each axis within its bound, the cells together past theirs.
    many = ",".join(f"0.{i}.0" for i in range(16))
    code, out, err = main(capsys, "matrix", "--layer", "all", "--impl", "sglang", "--sglang", many,
                          "--flashinfer", many, "--envs", envs, "--no-json", "--no-html")
    line = one_error_line(err)
    assert code == 2 and "512 cells" in line and "at most 256" in line, line
    assert not envs.exists()


def test_failed_or_stopped_environment_builds_leave_no_lock_file(tmp_path, scratch, capsys, monkeypatch):
    from graphbreak_doctor.matrix import envs as matrix_envs

    # Every build fails at once (uv's stand-in fails): each release's environment "cannot be installed".
    monkeypatch.setattr(matrix_envs, "uv_binary", lambda: "/bin/false")
    code, out, err = main(capsys, "matrix", "--layer", "dense", "--impl", "reference", "--flashinfer",
                          "0.7.1,0.7.2,0.7.3", "--envs", tmp_path / "failed", "--no-json", "--no-html")
    assert code == 0 and out.count("cannot install") == 3, out + err
    assert sorted(p.name for p in (tmp_path / "failed").iterdir()) == [], "a failed build left its lock file"
    # A build stopped by SIGTERM while uv installs.
    process, envs, _started = _matrix_build(tmp_path, scratch)
    try:
        assert [p.name for p in envs.iterdir() if p.name.endswith(".lock")], "the build holds its lock"
        process.send_signal(signal.SIGTERM)
    finally:
        _out, err = _finish(process, 60)
    assert process.returncode == 143, err
    assert "interrupted: SIGTERM received" in one_error_line(err)
    assert sorted(p.name for p in envs.iterdir()) == [], "a stopped build left its lock file or folder"

"""Hostile input that takes processes: the doctor killed or stopped by a
signal, workers that must die with it, what a killed run leaves, an input
that would block, a worker that crashes. Cases 6, 8, 12 and 14 of the list
in test_hostile.py, each test named after its case; real processes and real signals, each
bounded by a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT
from hostile_material import (blocked_on_fifo, graph_break_log, make_findings, one_error_line, start_doctor,
                              wait_for, write_findings)


@pytest.fixture
def scratch(tmp_path):
    """A temporary folder for the processes started here (their TMPDIR)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return tmp


def _processes_with_tmpdir(folder: Path) -> list[int]:
    """Pids of the processes whose TMPDIR is inside ``folder`` (a worker's is
    its job folder inside the run's folder), read from /proc."""
    marker = f"TMPDIR={os.path.realpath(folder)}/".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if any(v.startswith(marker) for v in environ.split(b"\0")):
                found.append(int(entry.name))
    return found


def _described(pid: int) -> str:
    """A process as /proc shows it: pid, state, parent, command line."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError as e:
        return f"{pid}: gone ({e.strerror})"
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return f"{pid} state {state} parent {ppid}: {command[:200]}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_case06_workers_die_with_a_killed_doctor_and_the_next_run_removes_the_leftovers(tmp_path, scratch):
    process = start_doctor("check", "--target", "fixtures.faults.targets:sleeps", "--target",
                           "fixtures.faults.targets:slow_factory", "--device", "cpu", "--mode", "explain", "--jobs", "2",
                           tmp=scratch)
    try:
        wait_for(lambda: len(_processes_with_tmpdir(scratch)) >= 2, 120, "both workers", process)
        assert process.poll() is None, "the doctor ended before its workers started"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        # A generous bound: on a loaded CI machine a worker that imported torch
        # takes a while to be torn down. A survivor is named, with its state.
        try:
            wait_for(lambda: not _processes_with_tmpdir(scratch), 90, "the workers to die with the doctor")
        except AssertionError as e:
            raise AssertionError(f"{e}: {[_described(pid) for pid in _processes_with_tmpdir(scratch)]}") from None
    finally:
        for pid in _processes_with_tmpdir(scratch):  # what the test itself must not leave running
            os.kill(pid, signal.SIGKILL)
        process.kill()
        process.communicate(timeout=60)  # the workers held its pipes too
    left = sorted([*scratch.glob("graphbreak-doctor-run-*"), *scratch.glob("graphbreak-doctor-logs-*")])
    assert len(left) == 2, "a killed doctor cannot remove its folders (its workers', its log folder)"
    from graphbreak_doctor.jobs import lifetime

    assert sorted(lifetime.sweep_temp(scratch)) == left
    assert not list(scratch.glob("graphbreak-doctor-*"))


def test_case06_leftovers_are_removed_only_when_their_owner_is_dead(tmp_path):
    from graphbreak_doctor.jobs import lifetime

    with lifetime.owned_folder("graphbreak-doctor-run-", dir=tmp_path) as alive:
        # A process a killed run left running, in a folder nobody owns any more.
        dead = tmp_path / "graphbreak-doctor-env-dead"
        (dead / "tmp").mkdir(parents=True)
        (dead / lifetime.OWNER).write_text("12345\n")
        orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                                  env={**os.environ, "TMPDIR": str(dead / "tmp")})
        try:
            wait_for(lambda: orphan.pid in lifetime.processes_in(dead), 30, "the orphan's environment")
            assert lifetime.sweep_temp(tmp_path) == [dead]
            assert orphan.wait(timeout=30) == -signal.SIGKILL
        finally:
            orphan.kill()
            orphan.wait()
        assert alive.is_dir() and not dead.exists()


_FAKE_UV = """\
#!{python}
import os, sys, time
args = sys.argv[1:]
if args[0] == "venv":
    os.makedirs(os.path.join(args[-1], "bin"), exist_ok=True)
    sys.exit(0)
open(os.environ["FAKE_UV_STARTED"], "w").close()
time.sleep(300)
"""

_MATRIX = ("import sys; import graphbreak_doctor.matrix.envs as e; uv = sys.argv.pop(1); e.uv_binary = lambda: uv; "
           "from graphbreak_doctor.cli import main; sys.exit(main(sys.argv[1:]))")


def _matrix_build(tmp_path: Path, scratch: Path) -> tuple[subprocess.Popen, Path, Path]:
    uv = tmp_path / "uv"
    uv.write_text(_FAKE_UV.format(python=sys.executable))
    uv.chmod(0o755)
    envs, started = tmp_path / "envs", tmp_path / "uv-started"
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT), "FAKE_UV_STARTED": str(started)}
    process = subprocess.Popen(
        [sys.executable, "-c", _MATRIX, str(uv), "matrix", "--layer", "dense", "--impl", "reference",
         "--flashinfer", "0.7.4", "--envs", str(envs), "--no-json", "--no-html"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(started.exists, 120, "the environment build", process)
    assert process.poll() is None, process.communicate()
    return process, envs, started


def test_case06_sigterm_during_an_environment_build_cleans_up_and_says_so(tmp_path, scratch):
    process, envs, _started = _matrix_build(tmp_path, scratch)
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert "interrupted: SIGTERM received" in one_error_line(err)
    assert not list(scratch.glob("graphbreak-doctor-env-*"))
    assert not [p for p in envs.iterdir() if not p.name.startswith(".")]


def test_case06_the_next_build_removes_what_a_killed_one_left(tmp_path, scratch, monkeypatch):
    import tempfile

    from graphbreak_doctor.matrix import envs as matrix_envs

    process, envs, _started = _matrix_build(tmp_path, scratch)
    process.kill()
    process.communicate(timeout=60)
    assert [p for p in envs.iterdir() if not p.name.startswith(".")], "a half-built environment"
    assert list(scratch.glob("graphbreak-doctor-env-*")), "the killed build's temporary folder"
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    matrix_envs.Environments(envs)  # the next run: its environments sweeps first
    assert not [p for p in envs.iterdir() if not p.name.startswith(".")]
    assert not list(scratch.glob("graphbreak-doctor-env-*"))



def test_case08_a_fifo_is_refused_at_once(tmp_path, scratch):
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    runs = [("ingest", fifo, "--no-html"), ("check", "--from", fifo), ("report", fifo, "--html", tmp_path / "r.html")]
    processes = [start_doctor(*argv, tmp=scratch) for argv in runs]  # at once: each mostly imports
    try:
        for argv, process in zip(runs, processes):
            try:
                _out, err = process.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{argv[0]} of a FIFO blocks")
            assert process.returncode == 2 and "FIFO" in one_error_line(err), (argv, err)
    finally:
        for process in processes:
            process.kill()
            process.communicate()


def test_case12_sigterm_outside_the_worker_pool_is_one_line_143(tmp_path, scratch):
    findings = write_findings(tmp_path / "g.json", make_findings(1))
    (tmp_path / "in.log").write_text(graph_break_log(2))
    (tmp_path / "marker_target.py").write_text(textwrap.dedent("""\
        import os, time

        def factory():
            open(os.environ["MARKER"], "w").close()
            time.sleep(300)
    """))
    marker = tmp_path / "started"
    runs = [
        # Each waits where a signal can reach it: an output FIFO nobody reads, a factory that sleeps.
        (("report", findings, "--html", tmp_path / "fifo-r"), "fifo-r"),
        (("ingest", tmp_path / "in.log", "--json", tmp_path / "fifo-i", "--no-html"), "fifo-i"),
        (("trace", "--in-process", "--target", "marker_target:factory", "--device", "cpu", "--no-html"), None),
    ]
    for _argv, fifo in runs:
        if fifo:
            os.mkfifo(tmp_path / fifo)
    processes = [start_doctor(*argv, tmp=scratch, cwd=tmp_path, env={"MARKER": str(marker)}) for argv, _ in runs]
    try:
        for (argv, fifo), process in zip(runs, processes):
            ready = (lambda p=process: blocked_on_fifo(p.pid)) if fifo else marker.exists
            wait_for(ready, 180, f"{argv[0]} to wait", process)
            process.send_signal(signal.SIGTERM)
        for (argv, _), process in zip(runs, processes):
            _out, err = process.communicate(timeout=60)
            assert process.returncode == 143, (argv, err)
            line = one_error_line(err)
            assert line == "graphbreak-doctor: interrupted: SIGTERM received; stopped, nothing written", argv
    finally:
        for process in processes:
            process.kill()
            process.communicate()


def test_case14_a_crashed_trace_names_its_device_and_versions(tmp_path, scratch):
    out_json = tmp_path / "f.json"
    process = start_doctor("trace", "--target", "fixtures.faults.targets:os_exit_0", "--device", "cpu", "--no-html",
                           "--json", out_json, tmp=scratch)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 3, out + err
    assert "device: cpu; torch" in out and "device: ?" not in out
    data = json.loads(out_json.read_text())
    assert data["device"]["name"] == "cpu" and data["environment"]["torch"]


def test_case14_a_segfault_is_one_line_not_a_native_stack(tmp_path, scratch):
    # PYTHONFAULTHANDLER makes the worker print Python's crash report; on an
    # emulated GPU tvm-ffi (loaded by FlashInfer) prints its own native stack.
    process = start_doctor("trace", "--target", "fixtures.faults.targets:segfault", "--device", "cpu", "--mode",
                           "explain", "--no-html", tmp=scratch, env={"PYTHONFAULTHANDLER": "1"})
    out, err = process.communicate(timeout=300)
    assert process.returncode == 3 and "killed by SIGSEGV" in out, out + err
    line = one_error_line(err)
    assert "native crash report" in line and "--debug shows it" in line


def test_case14_tvm_ffi_crash_report_is_held_back():
    from graphbreak_doctor.jobs.job import Job
    from graphbreak_doctor.jobs.pool import _Relay
    from graphbreak_doctor.targets.provider import Selection

    job = Job("trace", Selection("factory", "t", {}, spec="t"), "sm120", "explain")
    shown = []
    relay = _Relay(job, -1)
    import graphbreak_doctor.jobs.pool as pool

    original, pool._write_stderr = pool._write_stderr, shown.append
    try:
        relay.feed(b"the target's own line\n!!!!!!! Segfault encountered !!!!!!!\n")
        relay.feed(b'  File "x.c", line 1, in f\n' * 47)
        relay.close()
    finally:
        pool._write_stderr = original
    assert shown[0] == b"the target's own line\n" and len(shown) == 2
    assert b"native crash report (48 lines)" in shown[1]

"""The jobs of one run that use the same interpreter share one process that
imports torch once and forks each job's worker (jobs/shared.py), and each job
still starts as a worker of its own would: its module state fresh (explain
does not warm what fullgraph traces), its own TMPDIR, fresh random numbers,
SIGINT ignored and SIGTERM at its default, the parent-death signal, the
``--memory`` limit; a crash or a time-out in one job leaves the others'
findings whole; stderr is passed on per job. A real target written here
records, from inside each job's process, what that process sees; real
Dynamo runs, real processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT
from hostile_material import start_doctor, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, prctl and /proc are Linux's")

# Each job's process appends one JSON line to $PROBE_FILE when the factory
# runs; $PROBE_<MODE> makes that mode's job crash or hang there.
TARGET = textwrap.dedent('''\
    import ctypes, json, os, random, resource, signal, sys, tempfile, time

    import torch

    CALLS = 0  # module state: a job that inherited a warmed-up module would see more than 1


    def _ancestors():
        """(pid, cmdline, exe) of this process and each parent up to init."""
        found, pid = [], os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/stat", "rb") as f:
                ppid = int(f.read().rpartition(b")")[2].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            found.append((pid, cmdline, os.path.realpath(f"/proc/{pid}/exe")))
            pid = ppid
        return found


    def probe():
        global CALLS
        CALLS += 1
        with open(sys.argv[1]) as f:  # the job's own file: its mode
            mode = json.load(f)["mode"]
        workers = [a for a in _ancestors() if b"graphbreak_doctor.jobs.worker" in a[1]]
        pdeath = ctypes.c_int(0)
        ctypes.CDLL(None).prctl(2, ctypes.byref(pdeath), 0, 0, 0)  # PR_GET_PDEATHSIG
        record = {
            "mode": mode, "pid": os.getpid(), "calls": CALLS,
            "first_worker": workers[-1][0], "first_worker_exe": workers[-1][2],
            "first_worker_parent": int(open(f"/proc/{workers[-1][0]}/stat", "rb").read().rpartition(b")")[2].split()[1]),
            "tmpdir": os.environ.get("TMPDIR"), "gettempdir": tempfile.gettempdir(),
            "job_folder": os.path.dirname(os.path.abspath(sys.argv[1])),
            "random": random.random(),
            "sigint": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
            "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "pdeathsig": pdeath.value,
            "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0],
        }
        fd = os.open(os.environ["PROBE_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, (json.dumps(record) + "\\n").encode())
        os.close(fd)
        sys.stderr.write(os.environ.get(f"PROBE_SAY_{mode.upper()}", ""))
        sys.stderr.flush()
        how = os.environ.get(f"PROBE_{mode.upper()}", "")
        if how == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif how == "exit":
            os._exit(9)
        elif how == "abort":
            os.abort()
        elif how == "hang":
            time.sleep(600)

        def fn(x):
            return x + 1
        return fn, (torch.ones(4),)
''')


@pytest.fixture
def probe(tmp_path):
    """(folder with the target module, its probe file, scratch TMPDIR)."""
    (tmp_path / "shared_probe.py").write_text(TARGET)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return tmp_path, tmp_path / "probe.jsonl", scratch


def _records(path: Path) -> dict[str, dict]:
    assert path.exists(), "no job ran the factory"
    return {r["mode"]: r for r in map(json.loads, path.read_text().splitlines())}


def _doctor(probe, *extra: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict, dict]:
    folder, probe_file, scratch = probe
    process = start_doctor("trace", "--target", "shared_probe:probe", "--device", "cpu", "--mode", "both",
                           "--no-html", "--json", str(folder / "f.json"), *extra, tmp=scratch, cwd=folder,
                           env={"PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]),
                                "PROBE_FILE": str(probe_file), **(env or {})})
    out, err = process.communicate(timeout=600)
    done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    findings = json.loads((folder / "f.json").read_text()) if (folder / "f.json").exists() else {}
    return done, _records(probe_file), findings


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def test_both_modes_fork_from_one_torch_import_and_each_starts_fresh(probe):
    done, runs, findings = _doctor(probe, "--memory", "8")
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(runs) == {"explain", "fullgraph"}
    explain, fullgraph = runs["explain"], runs["fullgraph"]
    # One worker process was started for both modes (by the doctor), and both
    # jobs' processes were forked below it: torch was imported once.
    assert explain["first_worker"] == fullgraph["first_worker"], runs
    assert explain["first_worker_parent"] == fullgraph["first_worker_parent"]
    assert explain["pid"] != fullgraph["pid"]
    # Fresh per job: the target's module imported anew (explain did not warm
    # fullgraph), its own TMPDIR, its own random numbers, the signals and
    # limits a worker of its own has.
    for run in runs.values():
        assert run["calls"] == 1, runs
        assert run["tmpdir"] == run["gettempdir"] == os.path.join(run["job_folder"], "tmp"), run
        assert run["sigint"] and run["sigterm"], run
        assert run["pdeathsig"] == signal.SIGKILL, run
        assert run["rlimit_as"] == 8 << 30, run
    assert explain["tmpdir"] != fullgraph["tmpdir"]
    assert explain["random"] != fullgraph["random"]
    assert findings["modes"] == ["explain", "fullgraph"] and findings["outcome"] == "complete"


@pytest.mark.parametrize("how, said", [("segfault", "killed by SIGSEGV"), ("exit", "exit code 9"),
                                       ("abort", "killed by SIGABRT")])
def test_a_crash_in_one_mode_still_reports_the_other(probe, how, said):
    done, runs, findings = _doctor(probe, env={"PROBE_FULLGRAPH": how})
    assert done.returncode == 3, done.stdout + done.stderr
    assert runs["explain"]["first_worker"] == runs["fullgraph"]["first_worker"], runs
    assert said in done.stdout, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert findings["outcome"] == "crashed" and "explain" in findings["modes"], findings
    assert not _alive(runs["fullgraph"]["pid"])


def test_a_time_out_in_one_mode_kills_only_that_job(probe):
    done, runs, findings = _doctor(probe, "--timeout", "30", env={"PROBE_FULLGRAPH": "hang"})
    assert done.returncode == 4, done.stdout + done.stderr
    assert runs["explain"]["first_worker"] == runs["fullgraph"]["first_worker"], runs
    assert "after 30 s (--timeout)" in done.stdout, done.stdout
    assert "explain" in findings["modes"], findings
    assert not _alive(runs["fullgraph"]["pid"]) and not _alive(runs["fullgraph"]["first_worker"])


def _jobs(folder: Path, python: str = "", modes=("explain", "fullgraph")) -> list:
    from graphbreak_doctor.jobs import Job
    from graphbreak_doctor.jobs.job import TRACE
    from graphbreak_doctor.targets.provider import Selection

    spec = "shared_probe:probe"
    selection = Selection("factory", spec, {"spec": spec}, spec=spec)
    return [Job(TRACE, selection, "cpu", mode, python=python, cwd=str(folder)) for mode in modes]


def test_stderr_stays_per_job_and_a_crash_report_is_held_back_for_its_job_only(probe, monkeypatch, capfd):
    from graphbreak_doctor.jobs import run_jobs

    folder, probe_file, scratch = probe
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), str(ROOT)]))
    monkeypatch.setenv("PROBE_FILE", str(probe_file))
    # explain starts a native crash report and dies; fullgraph then writes.
    monkeypatch.setenv("PROBE_SAY_EXPLAIN", "explain says hello\nFatal Python error: probe\nstack line 1\n")
    monkeypatch.setenv("PROBE_EXPLAIN", "abort")
    monkeypatch.setenv("PROBE_SAY_FULLGRAPH", "fullgraph says hello\n")
    outcomes = run_jobs(_jobs(folder), timeout=300, parallel=2)
    err = capfd.readouterr().err
    runs = _records(probe_file)
    assert runs["explain"]["first_worker"] == runs["fullgraph"]["first_worker"], runs
    assert [o.status for o in outcomes] == ["crashed", "complete"], [o.message for o in outcomes]
    assert "explain says hello" in err and "fullgraph says hello" in err, err
    assert "Fatal Python error" not in err and "stack line 1" not in err, err
    assert "(explain, cpu): the worker's native crash report (2 lines) is not shown" in err, err


def test_another_environments_jobs_share_a_worker_of_that_interpreter(probe, monkeypatch):
    from graphbreak_doctor.jobs import run_jobs

    other = ROOT / ".venv-fi063" / "bin" / "python"
    if not other.exists():
        pytest.skip("no second environment (.venv-fi063)")
    folder, probe_file, scratch = probe
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), str(ROOT)]))
    monkeypatch.setenv("PROBE_FILE", str(probe_file))
    outcomes = run_jobs(_jobs(folder, python=str(other)), timeout=300, parallel=2)
    assert [o.status for o in outcomes] == ["complete", "complete"], [o.message for o in outcomes]
    runs = _records(probe_file)
    assert runs["explain"]["first_worker"] == runs["fullgraph"]["first_worker"], runs
    assert runs["explain"]["first_worker_exe"] == os.path.realpath(other)
    assert all(r["calls"] == 1 for r in runs.values())


def test_a_killed_shared_worker_ends_its_jobs_and_says_so(probe):
    folder, probe_file, scratch = probe
    process = start_doctor("trace", "--target", "shared_probe:probe", "--device", "cpu", "--mode", "both",
                           "--no-html", tmp=scratch, cwd=folder,
                           env={"PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]), "PROBE_FILE": str(probe_file),
                                "PROBE_EXPLAIN": "hang", "PROBE_FULLGRAPH": "hang"})
    try:
        wait_for(lambda: probe_file.exists() and len(probe_file.read_text().splitlines()) == 2, 300,
                 "both jobs", process)
        runs = _records(probe_file)
        os.kill(runs["explain"]["first_worker"], signal.SIGKILL)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 3, out + err
    assert "the worker process that imports torch for this run's jobs ended (was killed by SIGKILL)" in out, out
    # Each job's supervisor got its parent-death signal and ended its job.
    deadline = time.monotonic() + 30
    while any(_alive(r["pid"]) for r in runs.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(r["pid"]) for r in runs.values()), runs


# A shared worker that serves one fork request, its forked process held (by a
# wrapper around os.fork, here only) right after the fork until the shared
# worker is gone: the window in which a killed doctor takes the shared worker
# along. The job writes its pid to argv[2] if it runs anyway.
_HELD_FORK = textwrap.dedent('''\
    import os, sys, time

    from graphbreak_doctor.jobs import lifetime, shared

    real_fork = os.fork


    def fork_then_wait():
        parent = os.getpid()
        pid = real_fork()
        if pid == 0:
            os.fork = real_fork
            while os.getppid() == parent:
                time.sleep(0.01)
        return pid


    os.fork = fork_then_wait
    request = shared.serve(int(sys.argv[1]), "")
    lifetime.supervise(request["zygote"])
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(300)
''')


def test_a_job_forked_just_before_its_shared_worker_dies_ends_too(tmp_path):
    import socket

    marker = tmp_path / "ran"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    worker = subprocess.Popen([sys.executable, "-c", _HELD_FORK, str(theirs.fileno()), str(marker)],
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, pass_fds=(theirs.fileno(),),
                              stdin=subprocess.DEVNULL)
    theirs.close()
    forked = None
    try:
        request = {"op": "fork", "index": 0, "job": str(tmp_path / "job.json"),
                   "result": str(tmp_path / "result.json"), "tmp": str(tmp_path)}
        with open(os.devnull, "wb") as sink:
            socket.send_fds(ours, [json.dumps(request).encode()], [sink.fileno()])
        ours.settimeout(60)
        started = json.loads(ours.recv(4096))
        assert started["op"] == "started", started
        forked = started["pid"]
        worker.kill()
        worker.wait(timeout=30)
        wait_for(lambda: not _alive(forked), 30, "the forked job to end with its shared worker")
        assert not marker.exists(), "the job ran on after its shared worker died"
    finally:
        for pid in filter(None, [forked, int(marker.read_text() or 0) if marker.exists() else None]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.kill()
        worker.wait()
        ours.close()

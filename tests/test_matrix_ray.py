"""The matrix on a Ray cluster (``matrix --executor ray``): a real local
cluster of two nodes, one CPU each, started by the tests with Ray's own
``ray start``, and the doctor's driver connecting to it.

Ray binds to the machine's network address and probes outside addresses to
find it; so the cluster, the drivers and the processes the tests kill all
live in a network namespace of their own with only loopback (``ip netns``;
CI runs as root), with usage statistics and the dashboard off. Outside CI a
machine that cannot make one skips these tests; in CI they fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FI_NEW, FI_OLD
from ray_cluster import ENV, NoNamespace, loopback_cluster, popen_in_ns

# A Ray cluster per module: the matrix stage runs these (make test-vllm-matrix), beside SGLang's.
pytestmark = pytest.mark.ray_cluster

ray = pytest.importorskip("ray", reason="Ray is an optional extra (requirements/ray.txt)")

# The name each task's Ray worker takes while it runs (Ray: ray::<task name>).
TASK_TITLE = b"ray::graphbreak-doctor "


@pytest.fixture(scope="module")
def cluster():
    """(namespace, address): a head node and a second node, one CPU each."""
    try:
        with loopback_cluster(nodes=2, cpus=1) as found:
            yield found
    except NoNamespace as e:
        if os.environ.get("CI"):
            pytest.fail(f"a network namespace for the Ray cluster: {e} (CI runs as root)")
        pytest.skip(f"cannot make a network namespace here: {e}")


def matrix_args(out: Path, envs_dir: Path, flashinfer: str, address: str) -> list[str]:
    """The reference matrix's arguments (conftest.reference_run), on Ray."""
    return ["matrix", "--layer", "dense", "--impl", "reference", "--flashinfer", flashinfer,
            "--device", "sm120,sm100", "--mode", "fullgraph", "--envs", str(envs_dir),
            "--json", str(out / "m.json"), "--html", str(out / "m.html"), "--executor", "ray", "--address", address]


def doctor_in(ns: str, *args: str, cwd: Path) -> subprocess.Popen:
    return popen_in_ns(ns, sys.executable, "-m", "graphbreak_doctor", *args, cwd=cwd)


def _table(stdout: str) -> list[str]:
    """The table and the diffs: every line before the timings."""
    return [ln for ln in stdout.splitlines() if not ln.startswith(("set-up:", "JSON", "HTML", "Log"))]


def _comparable(cell: dict) -> dict:
    """A cell's JSON without what differs between two runs of the same trace:
    timings and the machine it ran on."""
    return {k: v for k, v in cell.items() if k not in ("setup_seconds", "host")}


def test_ray_gives_the_same_table_and_cells_as_a_local_run(cluster, reference_run, envs_dir, tmp_path):
    ns, address = cluster
    local, local_out, _ = reference_run
    proc = doctor_in(ns, *matrix_args(tmp_path, envs_dir, f"{FI_OLD},{FI_NEW}", address), cwd=tmp_path)
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-3000:]
    assert _table(stdout) == _table(local.stdout)
    assert f"on the Ray cluster at {address} (2 nodes, 2 CPUs)" in stdout
    ours = json.loads((tmp_path / "m.json").read_text())
    theirs = json.loads((local_out / "m.json").read_text())
    assert [_comparable(c) for c in ours["cells"]] == [_comparable(c) for c in theirs["cells"]]
    assert ours["diffs"] == theirs["diffs"]
    assert all(c["host"] for c in ours["cells"]) and not any(c["notes"] for c in ours["cells"])
    # What Ray printed in the driver is in the log, not on the terminal.
    assert "ray" not in stderr.lower(), stderr


def _kill_tasks(plan: dict[bytes, int], killed: list[str], stop: threading.Event) -> None:
    """Kill (SIGKILL) the Ray worker running a task whose title holds a key
    of ``plan``, as many times as the plan says (each new attempt once)."""
    seen: set[int] = set()
    while not stop.is_set() and any(plan.values()):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in seen:
                continue
            try:
                title = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            key = next((k for k in plan if title.startswith(TASK_TITLE) and k in title and plan[k]), None)
            if key is None:
                continue
            seen.add(int(entry.name))
            os.kill(int(entry.name), signal.SIGKILL)
            plan[key] -= 1
            killed.append(title.decode(errors="replace"))
        time.sleep(0.1)


@pytest.fixture(scope="module")
def faults_run(cluster, reference_run, envs_dir, tmp_path_factory):
    """FlashInfer 0.6.3 in both modes on Ray, with workers killed: sm120's
    explain task once (its retry runs), sm100's fullgraph task on both
    attempts. (In explain mode Dynamo itself crashes in 0.6.3's autotuner;
    the fullgraph mode runs to its verdict.)"""
    ns, address = cluster
    out = tmp_path_factory.mktemp("ray-faults")
    args = matrix_args(out, envs_dir, FI_OLD, address)
    args[args.index("fullgraph")] = "both"
    proc = doctor_in(ns, *args, cwd=out)
    plan, killed, stop = {b", sm120, trace explain": 1, b", sm100, trace fullgraph": 2}, [], threading.Event()
    killer = threading.Thread(target=_kill_tasks, args=(plan, killed, stop))
    killer.start()
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        stop.set()
        killer.join()
    assert len(killed) == 3, (killed, stderr[-2000:])
    # A crashed cell is a verdict of the matrix, not an error of the command.
    assert proc.returncode == 0, stderr[-3000:]
    cells = {c["device"]: c for c in json.loads((out / "m.json").read_text())["cells"]}
    row = next(ln for ln in stdout.splitlines() if ln.startswith(f"flashinfer {FI_OLD}"))
    return cells, row


def test_a_lost_worker_is_retried_once_and_the_cell_says_so(faults_run):
    cells, row = faults_run
    retried = cells["sm120"]
    assert [n for n in retried["notes"] if n.startswith("retried once: Ray worker lost (WorkerCrashedError")]
    assert "retried once: Ray worker lost" in row


def test_a_worker_lost_twice_makes_its_cell_crashed_and_the_others_complete(faults_run):
    cells, row = faults_run
    lost = cells["sm100"]
    assert lost["status"] == "crashed" and lost["reason"].startswith("Ray worker lost (WorkerCrashedError"), lost
    assert "CRASHED: Ray worker lost" in row
    assert cells["sm120"]["status"] == "failed"


def test_an_explain_mode_crash_keeps_the_fullgraph_verdict_and_is_noted(faults_run):
    cells, row = faults_run
    cell = cells["sm120"]
    # The verdict a fullgraph-only run gives (conftest.reference_run).
    assert cell["status"] == "failed" and (cell["category"], cell["function"]) == ("subprocess", "get_cuda_version")
    assert not cell["findings"]["fullgraph"]["crashed"]
    assert [n for n in cell["notes"] if n.startswith("explain mode crashed (the breaks before it are counted): ")]
    assert "FAILED: subprocess (get_cuda_version)" in row and "explain mode crashed" in row


def _tasks_running() -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if Path(entry.path, "cmdline").read_bytes().startswith(TASK_TITLE):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _doctor_workers() -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if b"graphbreak_doctor.jobs.worker" in Path(entry.path, "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_ctrl_c_cancels_every_task_and_writes_nothing(cluster, reference_run, envs_dir, tmp_path):
    ns, address = cluster
    before = set(_doctor_workers())
    proc = doctor_in(ns, *matrix_args(tmp_path, envs_dir, f"{FI_OLD},{FI_NEW}", address), cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not _tasks_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _tasks_running(), "no Ray task started"
    time.sleep(2)  # the doctor's workers are tracing
    # The driver, not `ip netns exec` (which execs it: the same process).
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == ("graphbreak-doctor: interrupted: SIGINT received; stopped, "
                                               "nothing written"), stderr
    assert not any(tmp_path.iterdir())
    deadline = time.monotonic() + 30
    while (_tasks_running() or set(_doctor_workers()) - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _tasks_running() and not set(_doctor_workers()) - before


def test_no_cluster_is_one_line_exit_2_and_writes_nothing(tmp_path):
    # Port 1 on loopback: nothing listens there.
    proc = subprocess.run([sys.executable, "-m", "graphbreak_doctor", "matrix", "--layer", "dense", "--impl",
                           "reference", "--executor", "ray", "--address", "127.0.0.1:1"],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("graphbreak-doctor: error: no Ray cluster reachable at 127.0.0.1:1: "
                                   "Connection refused")
    assert not any(tmp_path.iterdir())


def test_without_ray_the_ray_executor_is_one_line_exit_2(tmp_path):
    # An interpreter where Ray does not import, as one without the extra.
    code = ("import sys; sys.modules['ray'] = None; from graphbreak_doctor.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "matrix", "--layer", "dense", "--impl", "reference",
                           "--executor", "ray"], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("graphbreak-doctor: error: --executor ray needs Ray: "
                                   "pip install 'graphbreak-doctor[ray]'")

"""Every process a traced target starts is gone when the doctor exits,
whatever the outcome: the trace finished, timed out, the target ended its
worker, the doctor was stopped by SIGTERM or killed -- also a process that
left the worker's session (``setsid``), ignores SIGTERM and is orphaned by a
double fork. Real targets written here, the doctor in a process of its own,
real processes and signals, each bounded by a timeout.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hostile_material import start_doctor, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux's")

# The target module: each factory first starts a process that escapes as far
# as a process can -- its own session, SIGTERM ignored, orphaned by a double
# fork -- and waits until that process wrote its pid to $ORPHAN_PID_FILE.
TARGET = textwrap.dedent('''\
    import os, subprocess, sys, time

    import torch

    ESCAPE = """
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork():
        os._exit(0)  # the middle process ends: its child is an orphan
    os.setsid()  # a session of its own (the middle one's was already)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
    """


    def _escape():
        path = os.environ["ORPHAN_PID_FILE"]
        subprocess.Popen([sys.executable, "-c", ESCAPE, path], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            assert time.monotonic() < deadline, "the escaping process did not start"
            time.sleep(0.05)


    def escapes():
        _escape()
        return (lambda x: x + 1), (torch.ones(4),)


    def escapes_and_hangs():
        _escape()
        time.sleep(600)


    def escapes_and_exits():
        _escape()
        os._exit(7)
''')


def _alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` still runs the escaping process (not a zombie, and not
    a later process that got the same pid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[0] != b"Z" and marker.encode() in cmdline


@pytest.fixture
def escaping(tmp_path):
    """(folder with the target module, pid file, env, tmp): the escaped
    process is killed afterwards if the doctor left it (the test then fails)."""
    (tmp_path / "escaping_target.py").write_text(TARGET)
    pid_file = tmp_path / "orphan.pid"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    yield tmp_path, pid_file, {"ORPHAN_PID_FILE": str(pid_file)}, scratch
    if pid_file.exists():
        pid = int(pid_file.read_text())
        if _alive(pid, str(pid_file)):
            os.kill(pid, signal.SIGKILL)


def _orphan(pid_file: Path) -> int:
    assert pid_file.exists(), "the target never started its escaping process"
    return int(pid_file.read_text())


@pytest.mark.parametrize("how, factory, extra, code", [
    ("finished", "escapes", (), 0),
    ("timed out", "escapes_and_hangs", ("--timeout", "20"), 4),
    ("the target ended its worker", "escapes_and_exits", (), 3),
    ("in-process", "escapes", ("--in-process",), 0),
])
def test_a_setsid_orphan_ignoring_sigterm_is_gone_when_the_doctor_exits(escaping, how, factory, extra, code):
    folder, pid_file, env, scratch = escaping
    process = start_doctor("trace", "--target", f"escaping_target:{factory}", "--device", "cpu", "--mode",
                           "explain", "--no-html", *extra, tmp=scratch, cwd=folder, env=env)
    out, err = process.communicate(timeout=300)
    assert process.returncode == code, (how, out, err)
    pid = _orphan(pid_file)
    assert not _alive(pid, str(pid_file)), f"{how}: process {pid} the target started outlived the doctor"


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)])
def test_a_setsid_orphan_is_gone_when_the_doctor_is_stopped(escaping, signum, code):
    folder, pid_file, env, scratch = escaping
    process = start_doctor("trace", "--target", "escaping_target:escapes_and_hangs", "--device", "cpu", "--mode",
                           "explain", "--no-html", tmp=scratch, cwd=folder, env=env)
    try:
        wait_for(pid_file.exists, 180, "the escaping process", process)
        process.send_signal(signum)
        process.communicate(timeout=60)
        assert process.returncode == code
        pid = _orphan(pid_file)
        # A killed doctor cannot wait for anything: its workers' supervisors
        # get their parent-death signal and end what is below them.
        deadline = time.monotonic() + (30 if signum == signal.SIGKILL else 0)
        while _alive(pid, str(pid_file)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid, str(pid_file)), f"process {pid} the target started outlived the doctor"
    finally:
        process.kill()
        process.communicate()

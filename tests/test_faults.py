"""The gate never passes by accident: a target that exits, aborts, segfaults,
hangs or raises what is not an Exception, the doctor interrupted by a signal,
an output that cannot be written. Each case: the documented exit code, one
line on stderr where it is an error, no temporary folder left behind, no
partial output, and for `check` a JUnit file that records the outcome."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import junitparser
import pytest
import torch

from conftest import ROOT

FAULTS = "fixtures.faults.targets"


def _env(tmp: Path) -> dict[str, str]:
    # A temporary folder of the test's own: whatever a run leaves there shows.
    return {**os.environ, "TMPDIR": str(tmp)}


def _doctor(*args: str, tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphbreak_doctor", *args], cwd=ROOT, env=_env(tmp),
                          capture_output=True, text=True, timeout=timeout)


def _junit_errors(path: Path) -> list[junitparser.Error]:
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = [xml] if isinstance(xml, junitparser.TestSuite) else list(xml)
    return [r for suite in suites for case in suite for r in case.result if isinstance(r, junitparser.Error)]


@pytest.fixture
def scratch(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    yield tmp
    # torch keeps its own compile cache there (torchinductor_<user>), for every
    # torch program on the machine; anything else is left by the doctor.
    left = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_"))
    assert not left, f"left behind in the temporary folder: {left}"


# (factory, device, what the outcome line says)
CRASHES = [
    ("exit_0", "cpu", "the target called sys.exit(0)"),
    ("exit_3", "cpu", "the target called sys.exit(3)"),
    ("os_exit_0", "sm120", "the target ended the worker process (exit code 0"),
    ("segfault", "sm120", "the worker was killed by SIGSEGV"),
    ("keyboard_interrupt", "cpu", "the target raised KeyboardInterrupt"),
    ("base_exception", "cpu", "the target raised Halt: the target stops here"),
    ("qualname_raises", "cpu", "RuntimeError: no name for you"),
]


@pytest.mark.parametrize("factory,device,said", CRASHES)
def test_a_target_that_ends_the_process_or_raises_is_a_crash_exit_3(tmp_path, scratch, factory, device, said):
    junit = tmp_path / "gate.xml"
    result = _doctor("check", "--target", f"{FAULTS}:{factory}", "--device", device, "--max-breaks", "99",
                     "--junit", str(junit), "--json", str(tmp_path / "f.json"), tmp=scratch)
    assert result.returncode == 3, result.stdout + result.stderr
    assert said in result.stdout
    assert "gate: CRASHED" in result.stdout
    errors = _junit_errors(junit)
    assert errors and said in errors[0].message
    assert (tmp_path / "f.json").exists()


def test_a_target_past_the_timeout_is_killed_exit_4(tmp_path, scratch):
    junit = tmp_path / "gate.xml"
    started = time.monotonic()
    result = _doctor("check", "--target", f"{FAULTS}:sleeps", "--device", "sm120", "--timeout", "20",
                     "--junit", str(junit), tmp=scratch)
    assert time.monotonic() - started < 120
    assert result.returncode == 4, result.stdout + result.stderr
    assert "the trace timed out: after 20 s (--timeout); the worker was killed" in result.stdout
    assert "gate: TIMED OUT" in result.stdout
    (error,) = [e for e in _junit_errors(junit) if "timed out" in e.message][:1]
    assert error.type == "timed-out"


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_doctor_stops_it_cleanly(tmp_path, scratch, signum, code):
    out = tmp_path / "f.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "graphbreak_doctor", "check", "--target", f"{FAULTS}:slow_factory", "--device",
         "sm120", "--json", str(out), "--junit", str(tmp_path / "gate.xml")],
        cwd=ROOT, env=_env(scratch), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until the workers have started (their folders exist), then signal.
    deadline = time.monotonic() + 120
    while not any(p.name.startswith("graphbreak-doctor-run-") for p in scratch.iterdir()):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.2)
    time.sleep(1)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphbreak-doctor: interrupted:") and signum.name in lines[0]
    assert not out.exists() and not (tmp_path / "gate.xml").exists()


def test_in_process_sys_exit_is_still_a_crash(tmp_path, scratch):
    result = _doctor("trace", "--in-process", "--target", f"{FAULTS}:exit_0", "--device", "cpu", "--no-html",
                     tmp=scratch)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "CRASHED: the trace crashed: the target called sys.exit(0)" in result.stdout


def test_a_multi_line_message_is_one_escaped_line(scratch):
    result = _doctor("trace", "--target", f"{FAULTS}:multiline_error", "--device", "cpu", "--no-html", tmp=scratch)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.endswith("raised ValueError: first line ...")
    debug = _doctor("trace", "--debug", "--target", f"{FAULTS}:multiline_error", "--device", "cpu", "--no-html",
                    tmp=scratch)
    assert debug.returncode == 2 and "second line" in debug.stderr and "Traceback" in debug.stderr


def test_an_unwritable_second_output_leaves_no_first_output(tmp_path, scratch):
    out = tmp_path / "out"
    out.mkdir()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        # Root writes anywhere: a read-only file system is the unwritable place then.
        target = "/proc/r.html" if os.geteuid() == 0 else str(locked / "r.html")
        result = _doctor("trace", "--target", "fixtures.breaks.clean:target", "--device", "cpu",
                         "--json", str(out / "f.json"), "--html", target, tmp=scratch)
    finally:
        locked.chmod(0o700)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert target in line and ".r.html." not in line
    assert list(out.iterdir()) == []


def test_a_missing_output_folder_is_a_usage_error_before_tracing(tmp_path, scratch):
    started = time.monotonic()
    result = _doctor("check", "--target", f"{FAULTS}:sleeps", "--device", "cpu", "--junit",
                     str(tmp_path / "nowhere" / "gate.xml"), tmp=scratch)
    assert result.returncode == 2 and "no such folder" in result.stderr
    assert time.monotonic() - started < 60  # refused before the (endless) trace


def test_torch_settings_a_target_changes_do_not_leak():
    from fixtures.faults.targets import changes_torch_state
    from graphbreak_doctor.testing import assert_no_graph_breaks

    fn, args = changes_torch_state()
    assert_no_graph_breaks(fn, *args)
    assert torch.get_default_dtype() == torch.float32
    assert torch.is_grad_enabled()


def test_each_mode_starts_from_torch_s_own_settings(tmp_path, scratch):
    """In --in-process mode the explain trace's float64 default must not reach the
    fullgraph trace: both see float32 inputs and give the same graph."""
    for how in (["--in-process"], []):
        result = _doctor("trace", *how, "--target", f"{FAULTS}:changes_torch_state", "--device", "cpu",
                         "--no-html", "--json", str(tmp_path / "f.json"), tmp=scratch)
        assert result.returncode == 0, result.stderr
        assert "fullgraph: OK" in result.stdout


def test_no_folder_of_the_doctor_is_left_in_the_temporary_folder(tmp_path, scratch):
    """An emulated trace (fake toolkit, JIT cache, compiled stubs) cleans up after itself."""
    result = _doctor("trace", "--target", "fixtures.flashinfer_targets:fp4_quantize_wrapper", "--device", "sm120",
                     "--no-html", tmp=scratch)
    assert result.returncode == 0, result.stderr
    assert tempfile.gettempdir() != str(scratch)

"""``--memory``: every command that runs targets in workers (trace, check,
fix, matrix) limits each worker's address space, with one default; a target
that allocates past the limit is a crash that names the limit (exit 3), not a
bad target (exit 2) and not an allocation that goes through. A real target
written here, reserving 3 GiB (torch.empty: address space, no pages
touched), the doctor in a process of its own.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap

import pytest

from conftest import ROOT, run_cli

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux")

TARGET = textwrap.dedent('''\
    import torch


    def allocates_in_the_call():
        def fn(x):
            return x + torch.empty(3 << 30, dtype=torch.uint8)[:4].float()
        return fn, (torch.ones(4),)


    def allocates_in_the_factory():
        big = torch.empty(3 << 30, dtype=torch.uint8)
        return (lambda x: x + big[:4].float()), (torch.ones(4),)
''')

LIMIT = "out of memory: the worker's address space is limited to 2 GiB (--memory)"


@pytest.fixture
def target_dir(tmp_path):
    (tmp_path / "memory_target.py").write_text(TARGET)
    return tmp_path


def _run(target_dir, command, *argv):
    html = () if command == "check" else ("--no-html",)  # check writes HTML only when asked
    return run_cli(command, *argv, "--device", "cpu", *html, cwd=target_dir,
                   env={"PYTHONPATH": os.pathsep.join([str(target_dir), str(ROOT)])})


@pytest.mark.parametrize("command, factory, mode", [
    ("trace", "allocates_in_the_call", "explain"),
    ("trace", "allocates_in_the_factory", "explain"),
    ("check", "allocates_in_the_call", "explain"),
    ("fix", "allocates_in_the_call", "fullgraph"),
])
def test_an_allocation_past_memory_is_a_crash_naming_the_limit(target_dir, command, factory, mode):
    out_json = target_dir / "f.json"
    done = _run(target_dir, command, "--target", f"memory_target:{factory}", "--mode", mode, "--memory", "2",
                "--json", str(out_json))
    assert done.returncode == 3, done.stdout + done.stderr
    assert LIMIT in done.stdout, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    findings = json.loads(out_json.read_text())
    assert findings["outcome"] == "crashed" and LIMIT in json.dumps(findings)


def test_one_default_limit_on_every_command_lets_a_3_gib_reservation_through(target_dir):
    done = _run(target_dir, "trace", "--target", "memory_target:allocates_in_the_call", "--mode", "explain")
    assert done.returncode == 0, done.stdout + done.stderr
    defaults = set()
    for command in ("trace", "check", "fix", "matrix"):
        shown = " ".join(run_cli(command, "--help", env={"PYTHONPATH": str(ROOT)}).stdout.split())
        found = re.search(r"--memory GB address-space limit per worker, GiB \(default (\d+);", shown)
        assert found, f"{command} --help: no --memory with its default"
        defaults.add(int(found.group(1)))
    assert len(defaults) == 1, defaults


def test_memory_with_in_process_is_refused_in_one_line(target_dir):
    done = _run(target_dir, "trace", "--target", "memory_target:allocates_in_the_call", "--in-process",
                "--memory", "2")
    assert done.returncode == 2
    assert done.stderr.strip() == ("graphbreak-doctor: error: --memory limits each worker's address space: "
                                   "--in-process runs no worker")

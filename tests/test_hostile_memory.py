"""The fifth hostile round, items 5 and 6: ``--memory`` failures diagnosed by
cause, and limits no worker can be given refused before any worker starts.

Cases (real targets written here, the doctor in a process of its own, each
worker under its real RLIMIT_AS):

- a ``MemoryError`` the target raises itself (``raise MemoryError("mine")``),
  in its call or in its factory, is its own failure, reported as a
  ``ValueError`` would be (exit 2, one line), never as the limit's;
- an import whose shared object cannot be mapped under the limit (the
  dynamic loader's ``ImportError``, as SGLang's build meets it under
  ``--memory 1``) names the limit (exit 3), never a bad target;
- an ``mmap`` past the limit in the eager warm-up of a fullgraph trace names
  the limit (exit 3), never "traced cold" then a ``[filesystem]`` break and
  exit 0;
- ``--memory`` past what setrlimit takes (``99999999999999999999``, and one
  GiB past the largest), or past the doctor's own hard limit, is refused:
  exit 2, one line, no worker started; under such a hard limit the default
  limit is the hard one, so a plain trace still runs.
"""

from __future__ import annotations

import os
import resource
import sys
import textwrap

import pytest

from conftest import ROOT, run_cli
from hostile_material import main, one_error_line, start_doctor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux")

TARGET = textwrap.dedent('''\
    import importlib.util
    import mmap
    import os
    import resource

    import torch


    def raises_in_the_call():
        def fn(x):
            raise MemoryError("mine")
        return fn, (torch.ones(4),)


    def raises_in_the_factory():
        raise MemoryError("mine")


    def maps_past_the_limit():
        def fn(x):
            return x + len(mmap.mmap(-1, 20 << 30))
        return fn, (torch.ones(4),)


    def imports_past_the_limit():
        importlib.util.find_spec("_codecs_jp")  # the finder's own reads done first
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        # All the limit allows but 128 KiB; the module's object spans 270 KiB.
        held = mmap.mmap(-1, resource.getrlimit(resource.RLIMIT_AS)[0] - used - (128 << 10))
        import _codecs_jp  # noqa: F401
        return (lambda x: x + len(held)), (torch.ones(4),)


    def fits():
        return (lambda x: x + 1), (torch.ones(4),)
''')

LIMIT = "out of memory: the worker's address space is limited to {} GiB (--memory) and the target asked for more"
LARGEST_GIB = ((1 << 63) - 1) >> 30  # setrlimit takes a C long


@pytest.fixture
def target_dir(tmp_path):
    (tmp_path / "memory_hostile.py").write_text(TARGET)
    return tmp_path


def _trace(target_dir, factory, *argv):
    return run_cli("trace", "--target", f"memory_hostile:{factory}", "--device", "cpu", "--no-html", *argv,
                   cwd=target_dir, env={"PYTHONPATH": os.pathsep.join([str(target_dir), str(ROOT)])})


@pytest.mark.parametrize("factory, said", [
    ("raises_in_the_call", "the target raises without torch.compile: MemoryError: mine"),
    ("raises_in_the_factory", "target factory memory_hostile:raises_in_the_factory raised MemoryError: mine"),
])
def test_a_memory_error_the_target_raises_is_its_own(target_dir, factory, said):
    done = _trace(target_dir, factory, "--mode", "explain", "--memory", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert one_error_line(done.stderr) == f"graphbreak-doctor: error: {said}"
    assert "--memory" not in done.stdout + done.stderr


def test_an_import_that_cannot_be_mapped_under_the_limit_names_it(target_dir):
    done = _trace(target_dir, "imports_past_the_limit", "--mode", "explain", "--memory", "2")
    assert done.returncode == 3, done.stdout + done.stderr
    assert LIMIT.format(2) + " (ImportError: " in done.stdout, done.stdout
    assert "failed to map segment from shared object" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr


def test_an_mmap_past_the_limit_in_the_warm_up_names_it(target_dir):
    done = _trace(target_dir, "maps_past_the_limit", "--mode", "fullgraph", "--memory", "1")
    assert done.returncode == 3, done.stdout + done.stderr
    assert LIMIT.format(1) + " (OSError: [Errno 12] Cannot allocate memory)" in done.stdout, done.stdout
    assert "[filesystem]" not in done.stdout and "traced cold" not in done.stdout, done.stdout


@pytest.mark.parametrize("command", ["trace", "check", "fix", "matrix"])
@pytest.mark.parametrize("value", ["99999999999999999999", str(LARGEST_GIB + 1)])
def test_a_limit_setrlimit_cannot_take_is_refused_before_any_worker(capsys, command, value):
    code, out, err = main(capsys, command, "--target", "nowhere_at_all:target", "--memory", value)
    assert code == 2, out + err
    assert one_error_line(err) == (f"graphbreak-doctor: error: argument --memory: expected at most {LARGEST_GIB} GiB "
                                   f"(the largest address-space limit a worker can be given here), got '{value}'")
    assert out == ""


def _trace_under_hard_limit(target_dir, gib, *argv):
    """The doctor started with a hard address-space limit of ``gib`` GiB
    (``ulimit -v``); (exit code, stdout, stderr)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))

    doctor = start_doctor("trace", "--target", "memory_hostile:fits", "--device", "cpu", "--no-html", "--mode",
                          "explain", *argv, tmp=target_dir, cwd=target_dir, preexec_fn=limit,
                          env={"PYTHONPATH": os.pathsep.join([str(target_dir), str(ROOT)])})
    out, err = doctor.communicate(timeout=600)
    return doctor.returncode, out, err


def test_a_limit_past_the_doctors_own_hard_limit_is_refused_and_the_default_fits_under_it(target_dir):
    code, out, err = _trace_under_hard_limit(target_dir, 8, "--memory", "9")
    assert code == 2, out + err
    assert one_error_line(err) == ("graphbreak-doctor: error: argument --memory: expected at most 8 GiB "
                                   "(the largest address-space limit a worker can be given here), got '9'")
    code, out, err = _trace_under_hard_limit(target_dir, 8)  # the default, 16 GiB, is past it: the hard one holds
    assert code == 0, out + err
    assert "explain captured 1 graph" in out

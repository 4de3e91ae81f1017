"""File objects used as context managers are file-system work (fixtures/breaks/file_objects.py)."""

from pathlib import Path

import pytest

from graphbreak_doctor.diagnose import diagnose, target_builder

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "breaks" / "file_objects.py"

# target, the file object Dynamo would not enter, as it names the type
CASES = [
    ("text", "_io.TextIOWrapper"),
    ("binary", "_io.BufferedReader"),
    ("raw", "_io.FileIO"),
    ("mapped", "mmap.mmap"),
    ("temporary", "_io.BufferedRandom"),
    ("spooled", "tempfile.SpooledTemporaryFile"),
    ("listing", "posix.ScandirIterator"),
]


@pytest.mark.parametrize("target,culprit", CASES)
def test_a_file_object_context_manager_is_filesystem(target, culprit):
    findings = diagnose(target_builder(f"fixtures.breaks.file_objects:{target}"), mode="explain", device="cpu")
    entered = [b for b in findings.breaks if b.gb_type == "Unsupported context manager"]
    assert [b.culprit for b in entered] == [culprit]
    (brk,) = entered
    assert brk.category == "filesystem"
    assert brk.gb_id == "GB0142"
    assert brk.site.file == str(SOURCE)
    assert brk.fallbacks == []  # the type came from Dynamo's variable tracker, not its message
    if target != "spooled":  # its constructor is an io base-class call (_io._IOBase.__new__), not file work
        assert {b.category for b in findings.breaks} == {"filesystem"}

"""The command line as a user meets it: summaries, JSON, and one-line errors."""

import json

import pytest

from graphbreak_doctor.model import Findings

BAD_TARGETS = [
    ("no.such.module:target", "cannot import target module"),
    ("fixtures.breaks.clean:missing", "has no attribute"),
    ("fixtures.bad.targets:raises", "raised RuntimeError: factory failed on purpose"),
    ("fixtures.bad.targets:wrong_shape", "must return (fn, args) or (fn, args, kwargs)"),
    ("fixtures.bad.targets:not_callable", "first item must be callable"),
    ("fixtures.bad.targets:NOT_A_FACTORY", "is not callable"),
    ("fixtures.bad.targets:fails_in_eager", "the target raises without torch.compile"),
    ("not-a-spec", "must look like pkg.module:factory"),
]


@pytest.mark.parametrize("spec,message", BAD_TARGETS)
def test_bad_target_is_one_line_exit_2_and_no_json(cli, tmp_path, spec, message):
    out = tmp_path / "f.json"
    result = cli("trace", "--target", spec, "--device", "cpu", "--json", str(out), "--in-process")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphbreak-doctor: error: ")
    assert message in lines[0]
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_debug_shows_the_traceback(cli):
    result = cli("trace", "--target", "fixtures.bad.targets:raises", "--device", "cpu", "--debug")
    assert result.returncode == 2
    assert "Traceback" in result.stderr


@pytest.mark.parametrize("argv", [["trace", "--mode", "bogus"], ["trace", "--tokens", "0"], ["frobnicate"], []])
def test_bad_options_exit_2(cli, argv):
    result = cli(*argv)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_trace_prints_summary_and_writes_json(cli, tmp_path):
    out = tmp_path / "sub" / "findings.json"
    out.parent.mkdir()
    result = cli("trace", "--target", "fixtures.breaks.subprocess_call:target", "--device", "cpu", "--json", str(out), "--no-html",
                 "--in-process")
    assert result.returncode == 0, result.stderr
    assert "fullgraph: FAILED" in result.stdout
    assert "[subprocess]" in result.stdout
    assert "subprocess_call.py:10" in result.stdout
    assert f"JSON findings written to {out}" in result.stdout
    data = json.loads(out.read_text())
    assert data["schema_version"] == 2
    assert data["fullgraph"]["ok"] is False
    assert data["environment"]["torch"]
    assert [b["category"] for b in data["breaks"]] == ["subprocess"]
    assert Findings.from_dict(data).to_json() == out.read_text()


def test_repeated_target_gives_findings_per_target(cli, tmp_path):
    out = tmp_path / "findings.json"
    result = cli("trace", "--target", "fixtures.breaks.subprocess_call:target", "--target",
                 "fixtures.breaks.logging_calls:target", "--target", "fixtures.breaks.subprocess_call:target",
                 "--device", "cpu", "--mode", "explain", "--json", str(out), "--no-html")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("target: ") == 2  # the repeated spec is traced once
    written = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".json")
    assert written == ["findings-fixtures.breaks.logging_calls.target-cpu-explain.json",
                       "findings-fixtures.breaks.subprocess_call.target-cpu-explain.json"]
    # What the logging target wrote, beside its own findings.
    assert "layer input has" in (tmp_path / "findings-fixtures.breaks.logging_calls.target-cpu-explain.log").read_text()
    categories = {name: [b["category"] for b in json.loads((tmp_path / name).read_text())["breaks"]]
                  for name in written}
    assert categories[written[1]] == ["subprocess"]
    assert categories[written[0]] and "subprocess" not in categories[written[0]]


def test_same_trace_twice_gives_identical_json(cli, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path in (a, b):
        result = cli("trace", "--target", "fixtures.breaks.logging_calls:target", "--device", "cpu", "--json", str(path), "--no-html",
                     "--in-process")
        assert result.returncode == 0, result.stderr
    assert a.read_bytes() == b.read_bytes()


def test_module_entry_point_and_help(cli):
    result = cli("--help")
    assert result.returncode == 0
    assert "exit codes" in result.stdout and "usage or input error" in result.stdout


def test_what_the_traced_code_writes_goes_to_a_log_beside_the_report(cli, tmp_path):
    """The terminal shows the summary; the libraries' chatter (print, stderr,
    logging, warnings, C-level writes) is in <report>.log, each mode under a
    line naming it; --verbose shows it too."""
    from fixtures.chatter import LINES

    out = tmp_path / "f.json"
    result = cli("trace", "--target", "fixtures.chatter:target", "--device", "cpu", "--json", str(out), "--no-html")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert not any(line in result.stdout for line in LINES)
    log = tmp_path / "f.log"
    assert f"Log of the traced code's output written to {log}" in result.stdout
    text = log.read_text()
    for mode in ("explain", "fullgraph"):
        part = text.split(f"--- fixtures.chatter:target ({mode}, cpu)\n", 1)[1].split("\n--- ", 1)[0]
        assert all(line in part for line in LINES), part
    verbose = cli("trace", "--target", "fixtures.chatter:target", "--device", "cpu", "--mode", "explain",
                  "--no-html", "--in-process", "--verbose")
    assert verbose.returncode == 0 and all(line in verbose.stderr for line in LINES), verbose.stderr
    assert not any(line in verbose.stdout for line in LINES)
    assert "--verbose shows it (no output file to keep it beside)" in verbose.stdout


def test_a_worker_that_fails_shows_what_its_code_wrote(cli, tmp_path):
    from fixtures.chatter import LINES

    result = cli("trace", "--target", "fixtures.chatter:crashes", "--device", "cpu", "--mode", "fullgraph",
                 "--json", str(tmp_path / "f.json"), "--no-html")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "graphbreak-doctor: what fixtures.chatter:crashes (fullgraph, cpu) wrote:" in result.stderr
    assert all(line in result.stderr for line in LINES)
    assert all(line in (tmp_path / "f.log").read_text() for line in LINES)

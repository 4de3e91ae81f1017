"""The output rules (docs/output-rules.md) against hostile paths and values:
the traced code's log never lands on an input or another output; an output
named by a file descriptor (``/dev/stdout``) is written through, never
replaced; a FIFO nobody reads is refused, not waited on; a findings file cut
short is an error, not a log that reports nothing; no value from a file made
elsewhere starts a line of its own (a forged CI workflow command). The last
part holds the one writer and the one escaper with property tests on random
paths and values.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_cli
from graphbreak_doctor.cli.common import UsageError
from graphbreak_doctor.cli.outputs import check_output, write_file
from graphbreak_doctor.model import GateReport
from graphbreak_doctor.render import get
from graphbreak_doctor.text import escape_controls, inert
from hostile_material import main, make_findings, one_error_line, write_findings

# Prints to stdout on every call: a trace of it has a log to keep.
PRINTING = "fixtures.breaks.logging_calls:target"
TRACE = ("--target", PRINTING, "--device", "cpu", "--mode", "explain", "--in-process")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# ------------------------------------------------------------ the log


def test_the_traced_codes_log_lands_on_no_input_and_no_output(tmp_path):
    def doctor(*argv):  # a process of its own: the traced code prints to its real stdout
        done = run_cli(*map(str, argv), cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
        return done.returncode, done.stdout, done.stderr

    code, out, err = doctor("trace", *TRACE, "--json", "out.log", "--no-html")
    assert code == 0, err
    # The findings are where --json said; the log went beside them under another name.
    assert json.loads((tmp_path / "out.log").read_text())["target"]["spec"] == PRINTING
    assert "layer done" in (tmp_path / "out.log.log").read_text()
    assert "Log of the traced code's output written to out.log.log" in out

    # A baseline named *.log is an input: the log may not replace it (it did,
    # and the gate then passed on a log instead of the baseline).
    code, _, err = doctor("baseline", "write", "--from", "out.log", "-o", "b.log")
    assert code == 0, err
    baseline = (tmp_path / "b.log").read_bytes()
    code, out, err = doctor("check", *TRACE, "--baseline", "b.log", "--json", "b.json")
    assert code == 0, (out, err)
    assert (tmp_path / "b.log").read_bytes() == baseline
    assert "layer done" in (tmp_path / "b.json.log").read_text()

    # A log name that is a symlink (to a file nobody named) is passed over.
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "x.log").symlink_to(victim)
    code, out, err = doctor("trace", *TRACE, "--json", "x.json", "--no-html")
    assert code == 0, err
    assert victim.read_text() == "mine" and (tmp_path / "x.log").is_symlink()
    assert "layer done" in (tmp_path / "x.json.log").read_text()

    # An output written in place is no place for a log beside it (/dev/null.log).
    existed = os.path.lexists("/dev/null.log")
    try:
        code, out, err = doctor("trace", *TRACE, "--json", "/dev/null", "--no-html")
        assert code == 0, err
        assert existed or not os.path.lexists("/dev/null.log")
        assert "no output file to keep it beside" in out
    finally:
        if not existed and os.path.lexists("/dev/null.log"):
            os.unlink("/dev/null.log")


# ------------------------------------------- file descriptors and FIFOs


def test_an_output_named_by_a_file_descriptor_is_written_through_not_replaced(tmp_path):
    findings = write_findings(tmp_path / "g.json", make_findings(1))
    stdout = tmp_path / "stdout.txt"
    link = tmp_path / "out.json"
    link.symlink_to("/proc/self/fd/1")  # what /dev/stdout is
    with open(stdout, "w") as sink:
        done = subprocess.run([sys.executable, "-m", "graphbreak_doctor", "check", "--from", findings,
                               "--json", link], cwd=tmp_path, env=_env(), stdout=sink, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert done.returncode == 1, done.stderr  # the gate fails on the break
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    text = stdout.read_text()
    verdict, rest = text.split("{\n", 1)
    assert "gate: FAILED" in verdict
    document, announced = ("{\n" + rest).rsplit("}\n", 1)
    assert json.loads(document + "}")["breaks"][0]["id"] == make_findings(1).breaks[0].id
    assert announced.strip() == f"JSON findings written to {link}"


def test_a_fifo_that_nothing_reads_is_refused_not_waited_on(tmp_path):
    findings = write_findings(tmp_path / "g.json", make_findings(1))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "graphbreak_doctor", "check", "--from", findings, "--json", fifo],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "a FIFO that nothing reads" in one_error_line(done.stderr)
    assert stat_is_fifo(fifo)


def stat_is_fifo(path: Path) -> bool:
    import stat

    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_no_output_overwrites_a_file_of_an_input_folder_or_appends_to_a_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").write_text("[rank0]: nothing compiled\n")
    code, out, err = main(capsys, "ingest", logs, "--json", logs / "server.log", "--no-html")
    assert code == 2 and "a file of the input folder" in one_error_line(err), err
    assert (logs / "server.log").read_text() == "[rank0]: nothing compiled\n"
    # /proc/self/cwd/... names a path, not a file descriptor: replaced whole, never appended to.
    findings = write_findings(tmp_path / "g.json", make_findings(1))
    (tmp_path / "out.json").write_text('{"old": 1}')
    code, out, err = main(capsys, "check", "--from", findings, "--json", "/proc/self/cwd/out.json")
    assert code == 1, err
    assert json.loads((tmp_path / "out.json").read_text())["breaks"]


# ----------------------------------------------- findings cut short


def test_a_findings_file_cut_short_is_an_error_not_a_log(tmp_path, capsys):
    good = write_findings(tmp_path / "good.json", make_findings(2))
    text = good.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    damaged = tmp_path / "damaged.json"
    damaged.write_text(text.replace('"breaks"', "breaks", 1))
    for argv in (("diff", good, cut), ("check", "--from", cut), ("baseline", "write", "--from", cut, "-o",
                                                                   tmp_path / "b.json"),
                 ("ingest", damaged, "--no-html"), ("check", "--from", damaged)):
        code, out, err = main(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert "does not parse" in one_error_line(err), argv
    assert not (tmp_path / "b.json").exists()
    # Logs that open like JSON stay logs: a launcher's "[rank0]:" prefix, JSON lines.
    (tmp_path / "rank.log").write_text("[rank0]: starting\n[rank0]: nothing compiled\n")
    (tmp_path / "lines.log").write_text('{"event": "start"}\n{"event": "stop"}\n')
    for name in ("rank.log", "lines.log"):
        code, out, err = main(capsys, "check", "--from", tmp_path / name)
        assert code == 5, (name, out, err)  # read as a log: it holds no Dynamo report
        assert "nothing to gate" in one_error_line(err)


# ------------------------------------------------------- injection

FORGED = "x\n::error file=/etc/passwd::forged\r\n::add-mask::secret\x1b[2J::stop-commands::t\u2028y"


def _hostile_findings(value: str):
    """Findings whose free-text fields -- what a file from elsewhere can say
    -- all hold ``value``."""
    f = make_findings(1)
    b = f.breaks[0]
    site = dataclasses.replace(b.site, file=f"/srv/{value}.py", function=value, qualname=value, code=value)
    b = dataclasses.replace(b, gb_type=value, culprit=value, explanation=value, package=value, site=site,
                            actionable_frame=site, stack=[site],
                            fix=dataclasses.replace(b.fix, summary=value, where=value))
    target = dataclasses.replace(f.target, spec=value, title=value, notes=[value])
    return dataclasses.replace(f, breaks=[b], target=target)


@pytest.mark.unchecked_json("forged.json", "bad.json")
def test_hostile_free_form_values_neither_forge_lines_nor_stop_the_outputs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    # A mode the gate does not know is no findings (it would check nothing); said in one line.
    forged = write_findings(tmp_path / "forged.json", make_findings(1, modes=["explain\n::error::FORGED"]))
    for argv in (("baseline", "write", "--from", forged, "-o", tmp_path / "b.json"), ("check", "--from", forged)):
        code, out, err = main(capsys, *argv)
        assert code == 2 and "unknown trace mode 'explain\\n::error::FORGED'" in one_error_line(err), err
        assert not [line for line in (out + err).splitlines() if line.startswith("::")], out + err
    # A device name that is not text (free-form in the schema) costs no output.
    odd = write_findings(tmp_path / "odd.json", make_findings(1, device={"name": 5, "emulated": False}))
    code, out, err = main(capsys, "check", "--from", odd, "--junit", tmp_path / "j.xml")
    assert code == 1, err
    assert (tmp_path / "j.xml").exists()
    # --debug's traceback: every exception message one line.
    (tmp_path / "bad.json").write_text(json.dumps({"schema_version": 1, "target": "x\n::error::FORGED"}))
    code, out, err = main(capsys, "check", "--from", tmp_path / "bad.json", "--debug")
    assert code == 2 and "Traceback" in err
    assert not [line for line in (out + err).splitlines() if line.startswith("::")], err
    # Findings after much white space are still findings; a number of thousands of digits is an error.
    (tmp_path / "spaced.json").write_text(" " * 500 + make_findings(1).to_json())
    code, out, err = main(capsys, "check", "--from", tmp_path / "spaced.json")
    assert code == 1 and "gate: FAILED" in out, err
    (tmp_path / "long.json").write_text(make_findings(1).to_json().replace('"count": 1', '"count": 1' + "0" * 5000))
    code, out, err = main(capsys, "check", "--from", tmp_path / "long.json")
    assert code == 2 and "JSON that cannot be read" in one_error_line(err)


def test_no_value_from_findings_starts_a_line_of_its_own(tmp_path, capsys, monkeypatch):
    hostile = write_findings(tmp_path / "hostile.json", _hostile_findings(FORGED))
    good = write_findings(tmp_path / "good.json", make_findings(1))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code, out, err = main(capsys, "check", "--from", hostile)
    assert code == 1, err
    commands = [line for line in out.splitlines() if line.startswith("::")]
    # One annotation, the doctor's own, for the one break: nothing forged.
    assert len(commands) == 1 and commands[0].startswith("::error file=/srv/x"), out
    assert "\n::add-mask" not in out and "\x1b" not in out and "\u2028" not in out
    for argv in (("diff", good, hostile), ("ingest", hostile, "--no-html")):
        code, out, err = main(capsys, *argv)
        assert code == 0, (argv, err)
        assert not [line for line in out.splitlines() if line.startswith("::")], (argv, out)


# ------------------------------------------------------ properties

# Any text at all: every plane, controls, line and paragraph separators,
# lone surrogates.
ANY_TEXT = st.text(st.characters(codec=None), min_size=1, max_size=40)


def _gate_report(findings) -> GateReport:
    from graphbreak_doctor.gate.policy import Policy, evaluate

    return GateReport(device="cpu", targets=[evaluate(findings.target.spec, findings, Policy())])


def _no_command(name: str, line: str) -> None:
    """GitHub's runner takes a line for a command where it starts with
    ``::`` once its leading blanks are stripped, or holds the older ``##[``
    form anywhere; the github renderer's own lines are commands."""
    assert "##[" not in line, (name, line)
    if name != "github":
        assert not line.lstrip().startswith("::"), (name, line)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=ANY_TEXT)
@example(value="::error::FORGED")
@example(value="  ::warning file=x::FORGED")
@example(value="a ##[error]FORGED")
def test_every_value_prints_as_one_line(value):
    """The one escaper (text.one_line_values, applied by every terminal
    renderer): whatever a value holds, the text has the lines it has for a
    plain value, each printable, none a workflow command but the doctor's own."""
    plain, hostile = _hostile_findings("x"), _hostile_findings(value)
    for name, subject in (("terminal", lambda f: f), ("gate", _gate_report), ("github", _gate_report)):
        expected = get(name).render(subject(plain)).splitlines()
        shown = get(name).render(subject(hostile)).splitlines()
        assert len(shown) == len(expected), (name, value, shown)
        for line in shown:
            assert escape_controls(line) == line, (name, line)
            _no_command(name, line)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=ANY_TEXT)
@example(value="::error::FORGED")
@example(value="##[error]FORGED")
def test_a_rungs_patch_prints_line_by_line_behind_a_gutter(value):
    """A rung's patch is text of several lines (text.LINES): the ladder shows
    each line, escaped, behind a gutter that is not blank, so no line is a
    workflow command even with its indent stripped; every other value stays
    one line."""
    from graphbreak_doctor.model import Rung

    patch = f"--- m.py (f)\n+{value}\n::error::FORGED\n"
    rung = Rung(step=1, break_id="b", category=value, gb_type=value, site=value, recipe="hoist-call",
                patch=patch, where=value, result="fullgraph ok", detail=value)
    shown = get("ladder").render(dataclasses.replace(_hostile_findings(value), ladder=[rung])).splitlines()
    gutter = [line for line in shown if line.startswith("       | ")]
    assert [line.removeprefix("       | ") for line in gutter] == [
        inert(escape_controls(line)) for line in patch.rstrip("\n").splitlines()], shown
    for line in shown:
        assert escape_controls(line) == line, line
        _no_command("ladder", line)


FILE_NAME = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=30).filter(
    lambda n: n not in (".", "..") and len(n.encode()) < 200)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=FILE_NAME, text=ANY_TEXT)
def test_the_writer_writes_any_text_whole_under_any_name(tmp_path, name, text):
    """The one writer (cli/outputs.write_all): a file of any name holds the
    text whole (a lone surrogate as its escape), nothing is left beside it,
    and a symlink to it stays a link."""
    folder = tmp_path / "w"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    path = folder / name
    check_output(path)
    write_file(path, text)
    assert path.read_bytes() == text.encode("utf-8", "backslashreplace")
    assert os.listdir(folder) == [name]
    link = folder / f"{name[:20]}-link"
    link.symlink_to(name)
    write_file(link, text + "again")
    assert link.is_symlink() and path.read_bytes() == (text + "again").encode("utf-8", "backslashreplace")
    assert sorted(os.listdir(folder)) == sorted([name, link.name])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=FILE_NAME)
def test_no_name_for_an_input_is_taken_as_an_output(tmp_path, name):
    """check_output: the input itself, ``./``-prefixed, through a symlink or a
    hard link -- each is the input, refused before anything runs."""
    folder = tmp_path / "c"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    given_input = folder / name
    given_input.write_text("input")
    (folder / "soft").symlink_to(name)
    os.link(given_input, folder / "hard")
    for alias in (given_input, Path(os.path.relpath(given_input)), folder / "soft", folder / "hard",
                  Path(f"{folder}/./{name}")):
        with pytest.raises(UsageError, match="refusing to overwrite an input"):
            check_output(alias, [str(given_input)])
    assert given_input.read_text() == "input"


# ------------------------------------------------------ what to change first


def test_the_summary_leads_with_the_root_causes_each_fix_once(tmp_path):
    """The terminal: the verdict, then every root cause with its fix (the
    user's own function first, the library's next; a shared fix named by
    number), then the breaks, each naming its root cause, none repeating a fix."""
    library = ROOT / "fixtures" / "site-packages"
    done = run_cli("trace", "--target", "fixtures.breaks.through_library.and_user:target", "--device", "cpu",
                   "--in-process", "--json", str(tmp_path / "f.json"), "--no-html",
                   env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(library)])})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    findings = json.loads((tmp_path / "f.json").read_text())
    verdict = next(i for i, line in enumerate(lines) if line.startswith("fullgraph: FAILED"))
    causes = [i for i, line in enumerate(lines) if line.startswith("  #")]
    entries = [i for i, line in enumerate(lines) if line.startswith("  [")]
    assert verdict < causes[0] and causes[-1] < entries[0] and causes[-1] < 40
    assert len(causes) == len(findings["root_causes"]) == 3
    assert [lines[i].split(" at ")[0] for i in causes] == [
        "  #1 layer (fixtures)", "  #2 toolkit_version (kernelkit)", "  #3 artifact_stamp (kernelkit)"]
    assert all(lines[i + 1].startswith("      fix: ") for i in causes)
    for brk in findings["breaks"]:
        assert done.stdout.count(brk["fix"]["summary"]) == 1
    assert sum(line.startswith("      fix: root cause #") for line in lines) == len(findings["breaks"])

"""The fifth hostile round, items 7 and 8: a file of launch arguments inside
``--vllm-args``, and the doctor's own stdout and stderr as files no output
may land on.

Cases:

- ``--vllm-args "--config x.yaml"`` (x.yaml a link to a system file), in
  every spelling vLLM's own parser takes as ``--config`` (``--config FILE``,
  ``--config=FILE``, ``--config.KEY VALUE``, the abbreviations ``--conf`` and
  ``--confi``, after the model or another option): exit 2, one line, nothing
  written, before anything runs -- vLLM need not be installed to see it;
  ``matrix --vllm V --vllm-args ...`` refuses it the same way, before any
  environment is built. ``--config-format hf`` (vLLM's own option) and a
  ``--config`` of the doctor's outside ``--vllm-args`` are not this.
- ``trace --json out.json > out.log`` (a shell redirect, the common CI line):
  the summary stays in out.log, the traced code's log is out.json.log, named
  in the summary; the same with ``2> out.log``; with both names taken by the
  doctor's stdout and stderr, no log is kept and neither file is replaced.
- An output that is the file behind the doctor's stdout (``--json out.log >
  out.log``, a symlink or a hard link to it; ``check --junit``) is refused,
  exit 2, one line, the file left as the shell made it; ``--json
  /dev/stdout > out.log`` still puts the JSON after the summary.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from hostile_material import make_findings, one_error_line, write_findings

# Prints to stdout on every call: a trace of it has a log to keep.
PRINTING = "fixtures.breaks.logging_calls:target"
TRACE = ("trace", "--target", PRINTING, "--device", "cpu", "--mode", "explain", "--in-process", "--no-html")


# ------------------------------------------------- item 7: vLLM's --config


@pytest.fixture
def system_yaml(tmp_path) -> Path:
    """x.yaml, a link to a system file: what vLLM would read as its arguments."""
    link = tmp_path / "x.yaml"
    link.symlink_to("/etc/passwd")
    return link


@pytest.mark.parametrize("launch", [
    "--config x.yaml",
    "--config=x.yaml",
    "qwen3-30b-a3b --max-num-seqs 8 --config x.yaml",
    "--max-num-seqs 8 --conf x.yaml",
    "--confi=x.yaml",
    "--config.port 8000",
    "--served-model-name --config x.yaml",  # vLLM looks for the word anywhere
])
def test_a_file_of_vllm_arguments_is_refused_before_anything_runs(tmp_path, system_yaml, launch):
    done = run_cli("trace", "--vllm-args", launch, "--device", "cpu", "--json", "f.json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    line = one_error_line(done.stderr)
    assert "--vllm-args: --config (a file of server arguments) is not read" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]  # no findings, no reports/


def test_the_matrix_refuses_a_file_of_vllm_arguments_before_building_anything(tmp_path, system_yaml):
    envs = tmp_path / "envs"
    done = run_cli("matrix", "--model", "--vllm", "0.33.0", "--vllm-args", "--config x.yaml", "--envs", str(envs),
                   "--json", "m.json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--config (a file of server arguments) is not read" in one_error_line(done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]


def test_vllms_own_options_that_start_alike_are_not_refused():
    from graphbreak_doctor.targets.frameworks import registry

    vllm_launch_arguments = registry.get("vllm").split_launch

    assert vllm_launch_arguments("--config-format hf --max-num-seqs 8", None) == \
        (("--config-format", "hf", "--max-num-seqs", "8"), None)
    assert vllm_launch_arguments("qwen3-30b-a3b --config-format=mistral", None) == \
        (("--config-format=mistral",), "qwen3-30b-a3b")
    with pytest.raises(ValueError, match="--config"):
        vllm_launch_arguments("--config x.yaml", None)


# ------------------------------------- item 8: the doctor's own stdout/stderr


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """The doctor as a CI line runs it: through a shell, with its redirects."""
    doctor = f"{shlex.quote(sys.executable)} -m graphbreak_doctor"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command.replace("DOCTOR", doctor), shell=True, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


TRACE_LINE = "DOCTOR " + " ".join(TRACE)


def test_the_log_never_lands_on_the_doctors_stdout(tmp_path):
    done = shell(f"{TRACE_LINE} --json out.json > out.log", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = (tmp_path / "out.log").read_text()
    assert f"target: {PRINTING}" in summary and "breaks:" in summary, summary
    assert "JSON findings written to out.json" in summary
    assert "Log of the traced code's output written to out.json.log" in summary
    assert "layer done" not in summary
    assert "layer done" in (tmp_path / "out.json.log").read_text()
    assert json.loads((tmp_path / "out.json").read_text())["target"]["spec"] == PRINTING


def test_the_log_never_lands_on_the_doctors_stderr(tmp_path):
    done = shell(f"{TRACE_LINE} --json out.json 2> out.log", tmp_path)
    assert done.returncode == 0, (tmp_path / "out.log").read_text()[-2000:]
    assert "Log of the traced code's output written to out.json.log" in done.stdout
    assert "layer done" in (tmp_path / "out.json.log").read_text()
    assert "layer done" not in (tmp_path / "out.log").read_text()


def test_with_both_log_names_taken_by_stdout_and_stderr_no_log_is_kept(tmp_path):
    done = shell(f"{TRACE_LINE} --json out.json > out.log 2> out.json.log", tmp_path)
    assert done.returncode == 0, (tmp_path / "out.json.log").read_text()[-2000:]
    summary = (tmp_path / "out.log").read_text()
    assert f"target: {PRINTING}" in summary and "JSON findings written to out.json" in summary, summary
    assert "no output file to keep it beside" in summary
    assert "layer done" not in summary + (tmp_path / "out.json.log").read_text()


@pytest.mark.parametrize("output", ["out.log", "link.json", "hard.json"])
def test_an_output_on_the_doctors_stdout_is_refused(tmp_path, output):
    (tmp_path / "out.log").write_text("")
    (tmp_path / "link.json").symlink_to("out.log")
    os.link(tmp_path / "out.log", tmp_path / "hard.json")
    done = shell(f"{TRACE_LINE} --json {output} > out.log", tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    line = one_error_line(done.stderr)
    assert f"{output}: is the doctor's own stdout" in line, line
    assert (tmp_path / "out.log").read_text() == ""  # nothing ran, nothing replaced it
    assert (tmp_path / "hard.json").stat().st_ino == (tmp_path / "out.log").stat().st_ino
    assert (tmp_path / "link.json").is_symlink()


def test_a_gate_output_on_the_doctors_stderr_is_refused(tmp_path):
    write_findings(tmp_path / "g.json", make_findings(1))
    done = shell("DOCTOR check --from g.json --junit junit.xml 2> junit.xml", tmp_path)
    assert done.returncode == 2, done.stdout[-2000:]
    line = one_error_line((tmp_path / "junit.xml").read_text())
    assert "junit.xml: is the doctor's own stderr" in line, line


def test_dev_stdout_still_puts_the_json_after_the_summary(tmp_path):
    done = shell(f"{TRACE_LINE} --json /dev/stdout > out.log", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "out.log").read_text()
    summary, rest = text.split("{\n", 1)
    assert f"target: {PRINTING}" in summary
    document = json.loads("{\n" + rest.rsplit("}\n", 1)[0] + "}")
    assert document["target"]["spec"] == PRINTING

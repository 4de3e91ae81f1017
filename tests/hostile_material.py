"""What the hostile-input tests (test_hostile.py, test_hostile_processes.py)
share: findings written here, Dynamo's graph-break record as a log prints it,
the command line in this process or in a process of its own."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT
from graphbreak_doctor import cli as gbd_cli
from graphbreak_doctor.model import Break, Findings, Fix, Frame, TargetInfo


def make_break(i: int = 0, *, file: str = "/srv/app/model.py", line: int = 10, culprit: str = "",
           gb_type: str = "Failed to trace builtin operator") -> Break:
    site = Frame(file=file, line=line + i, function="layer", qualname="Model.layer", code="print('layer done')")
    return Break(id=f"{i:010d}", category="logging", gb_id="GB0059", gb_type=gb_type,
                 explanation="Dynamo does not know how to trace builtin operator `print`", hints=[],
                 culprit=culprit, via="", site=site, actionable_frame=site, package="app", stack=[site], count=1,
                 modes=["explain"], fix=Fix("guard-logging", "Guard the call with torch.compiler.is_compiling()",
                                             "", ""))


def make_findings(breaks: int = 1, **changes) -> Findings:
    f = Findings(target=TargetInfo(spec="app.model:target", provider="factory", title="app.model:target"),
                 environment={"python": "3.11.7", "torch": "2.13.0"}, device={"name": "cpu", "emulated": False},
                 modes=["explain"], breaks=[make_break(i) for i in range(breaks)])
    return dataclasses.replace(f, **changes)


def write_findings(path: Path, findings: Findings) -> Path:
    path.write_text(findings.to_json(), encoding="utf-8")
    return path


# A handled break as TORCH_LOGS=graph_breaks prints it (torch 2.13; recorded
# from fixtures.breaks.logging_calls, prefixes removed).
RECORD = """\
Graph break in user code at {file}:{line}
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Failed to trace builtin operator
  Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str'] (has_kwargs False){extra}
  Hint: If you are attempting to call a logging function (e.g. `print`), you can try adding it to `torch._dynamo.config.reorderable_logging_functions`.

  Developer debug context: builtin print [<class 'torch._dynamo.variables.constant.ConstantVariable'>] False

 For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html

User code traceback:
  File "{file}", line {line}, in layer
    print("layer done")

"""


def graph_break_log(count: int, extra: str = "") -> str:
    return "".join(RECORD.format(file=f"/srv/app/model_{i}.py", line=10 + i, extra=extra) for i in range(count))


def main(capsys, *argv: str) -> tuple[int, str, str]:
    code = gbd_cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def start_doctor(*argv: str, tmp: Path, cwd: Path = ROOT, env: dict | None = None, **kw) -> subprocess.Popen:
    full = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "graphbreak_doctor", *map(str, argv)], cwd=cwd, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_for(condition, timeout: float, what: str, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            return  # it ended first: the caller's assertions say why
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def blocked_on_fifo(pid: int) -> bool:
    """Waiting on a FIFO: blocked opening it, or (an output FIFO, which the
    doctor waits a few seconds for a reader to open) asleep between tries."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text().strip() in ("wait_for_partner", "hrtimer_nanosleep")
    except OSError:
        return False

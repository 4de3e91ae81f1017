"""What a worker is asked to do, and how it ended."""

from __future__ import annotations

import dataclasses
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from graphbreak_doctor.analysis.assemble import unfinished
from graphbreak_doctor.model import COMPLETE, CRASHED, Findings, TargetInfo
from graphbreak_doctor.targets.provider import Selection

# TRACE: one mode; FIX: the fix ladder; MAP: the compile map (compile_map.py);
# PROGRAM: the user's own program, a written patch's proof (fix/user_run.py);
# SIZES: the target called at the server's sizes (capture/sizes.py);
# CUDAGRAPH: the target captured into CUDA graphs (graphbreak_doctor.cudagraph).
TRACE, FIX, MAP, PROGRAM, SIZES, CUDAGRAPH = "trace", "fix", "map", "program", "sizes", "cudagraph"


@dataclass(frozen=True)
class Job:
    kind: str  # TRACE, FIX, MAP, PROGRAM, SIZES or CUDAGRAPH
    selection: Selection
    device: str
    mode: str
    steps: int = 0  # FIX: the ladder's step limit
    # FIX: the sizes the server compiles the target at (--sizes); () = what
    # the target's provider reads from the built target. SIZES: the sizes to
    # call it at, in order (a --target factory's may be shapes: tuples).
    sizes: tuple[int | tuple[int, ...], ...] = ()
    debug: bool = False
    # The interpreter of another environment (a matrix cell's); "" = this one.
    python: str = ""
    # Where the traced code's stdout and stderr go (jobs/output.py); "" = where
    # the process's own go.
    log: str = ""
    # The worker's current folder (what file paths in the findings are shown
    # relative to); "" = this process's.
    cwd: str = ""
    # A folder the worker's PYTHONPATH starts with (a written patch, whose
    # sitecustomize.py loads it as a server would); "" = none.
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        return cls(**{**data, "selection": Selection(**data["selection"]), "sizes": tuple(tuple(n) if isinstance(n, list) else n
                                                                      for n in data.get("sizes") or ())})

    def import_path(self) -> list[str]:
        """What the job's worker puts ahead on its import path: this
        interpreter's (a checkout or a test root on it); none for another
        environment's interpreter, which imports the doctor installed there."""
        return [] if self.python else [p for p in sys.path if p]

    def describe(self) -> str:
        return f"{self.selection.spec or self.selection.name} ({self.mode}, {self.device})"


@dataclass
class Outcome:
    """How one job ended: findings (traced to the end, or crashed under Dynamo
    with findings saying so), a usage error in the target, or no findings at
    all (the worker crashed, timed out or was interrupted)."""

    job: Job
    findings: Findings | None = None
    status: str = COMPLETE
    message: str = ""  # one line: why there are no findings, or the usage error
    usage: bool = False  # the target is bad input (exit 2)
    # The serving framework's own message where it refused the launch arguments (LaunchRefused).
    refused: str = ""
    details: list[str] = field(default_factory=list)  # --debug: the worker's traceback
    log: str = ""  # what the traced code wrote to stdout and stderr (Job.log's text)
    # What the job read (jobs/inputs.py: manifest), for the findings cache; None: not recorded.
    inputs: dict[str, Any] | None = None

    def as_findings(self) -> Findings:
        """The findings, or findings that record the outcome (for the gate,
        JUnit, SARIF and JSON of a target that did not finish)."""
        if self.findings is not None:
            return self.findings
        s = self.job.selection
        return unfinished(
            TargetInfo(spec=s.spec or s.name, provider=s.provider, title=s.spec or s.name),
            # What the run asked for, though the worker could not say it.
            _environment() if not self.job.python else {},
            _device(self.job.device),
            self.job.mode, self.message,
            outcome=self.status if self.status != COMPLETE else CRASHED,
        )


def _device(name: str) -> dict[str, Any]:
    """The device a job was to run on, from its preset (torch not needed)."""
    from graphbreak_doctor.emulation.presets import PRESETS

    preset = PRESETS.get(name)
    return preset.describe() if preset is not None else {"name": name}


def _environment() -> dict[str, str]:
    """This interpreter's versions, as a trace's findings record them
    (diagnose.environment), read from the installed packages' metadata."""
    import importlib.metadata
    import platform

    from graphbreak_doctor.targets.frameworks import registry

    env = {"python": platform.python_version()}
    for key, dist in (("torch", "torch"), ("flashinfer", "flashinfer-python")):
        try:
            env[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[key] = ""
    env.update(registry.releases())
    return env


class Interrupted(BaseException):
    """The doctor got SIGINT or SIGTERM: everything started is stopped and
    cleaned up, nothing is written, and the exit code is 128 + the signal.
    ``after``: what was written before it came and is kept (fix's patch,
    moved into place), said in its line instead of "nothing written"."""

    def __init__(self, signum: int, after: str = "") -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.after = after

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

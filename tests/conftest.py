import functools
import fcntl
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Where the session's traces are kept. `make test` sets it (reports/test-traces,
# emptied when it starts) so its three stages and .ci/run's gates read the same
# traces; without it each session keeps its own in a temporary folder.
TRACES_ENV = "GRAPHBREAK_DOCTOR_TEST_TRACES"

# The findings cache (docs/cache.md) is off for the suite: every test's trace
# is traced, and no test reads or fills a user's cache.
# tests/test_findings_cache.py turns it on, in a cache folder of its own.
os.environ["GRAPHBREAK_DOCTOR_NO_CACHE"] = "1"

# The emulated CUDA toolkit is found as the environment finds one
# (emulation/flashinfer: toolkit_environment). The suite's traces, goldens and
# CI's baselines are those of a server whose environment names its toolkit
# (CUDA_HOME, as GPU container images commonly set it); the tests of the other
# case unset it themselves.
os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")


@pytest.fixture(scope="session", autouse=True)
def _cache_key(tmp_path_factory):
    """The findings cache's key (jobs/cache_trust.py) in a folder of the
    test run's own: no test reads or makes the user's."""
    os.environ["GRAPHBREAK_DOCTOR_CACHE_KEY"] = str(tmp_path_factory.mktemp("cache-key") / "cache-key")


def run_script(code: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``code`` in a fresh interpreter (what it imports stays there) and
    read back what it printed as ``LABEL <json>`` lines, by label."""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    said = {}
    for line in result.stdout.splitlines():
        label, _, rest = line.partition(" ")
        if label.isupper() and rest:
            said[label] = json.loads(rest)
    return result, said


def run_cli(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the installed console entry point the way a user does."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "graphbreak_doctor", *args],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600,
    )


def sglang_has_tc_piecewise() -> bool:
    """Whether the installed SGLang still offers its tc_piecewise prefill
    runner to users (read from its files, not imported: SGLang is imported
    only inside an emulated device): a release with per-phase CUDA-graph
    backends accepts it unless it says it was removed; an older one has the
    piecewise CUDA-graph options."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        return False
    root = Path(spec.origin).parent / "srt"
    config = root / "model_executor" / "cuda_graph_config.py"
    if config.exists():
        return "tc_piecewise was removed" not in config.read_text(encoding="utf-8")
    return "piecewise_cuda_graph" in (root / "server_args.py").read_text(encoding="utf-8")


@pytest.fixture
def cli():
    return run_cli


def environment_name(python: str | Path = sys.executable) -> str:
    """The environment an interpreter belongs to: its virtual environment's
    folder name (.venv, .venv-fi063, .venv-sglang)."""
    if Path(python) == Path(sys.executable):
        return Path(sys.prefix).name
    return Path(python).parent.parent.name


@dataclass
class Traced:
    """One `graphbreak-doctor trace ARGS --json` run: its exit code, findings
    (None when it wrote none: exit 2) and stderr; ``path``: the findings file."""

    code: int
    stderr: str
    path: Path

    @functools.cached_property
    def findings(self):
        """Shared by every test that reads this trace: copy before changing it."""
        from graphbreak_doctor.model import Findings

        return Findings.from_json(self.path.read_text()) if self.path.exists() else None


class Traces:
    """`graphbreak-doctor trace` in a process of its own, as a user runs it,
    once per (arguments, environment): the golden, diff, gate, ingest and report
    tests read the same trace instead of tracing again. Arguments name the
    target, device and mode in full; ``python`` picks another environment's
    interpreter. Files: FOLDER/<environment>/<arguments>.json (the findings)
    and .run.json (exit code and stderr, written last)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._seen: dict[tuple, Traced] = {}

    def path(self, *args: str, python: str | Path = sys.executable) -> Path:
        from graphbreak_doctor.targets.factory import slug

        return self.folder / environment_name(python) / f"{slug('-'.join(a.lstrip('-') for a in args))}.json"

    def get(self, *args: str, python: str | Path = sys.executable, timeout: float = 900) -> Traced:
        key = (args, environment_name(python))
        if key in self._seen:
            return self._seen[key]
        path = self.path(*args, python=python)
        run = path.with_suffix(".run.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        # Two test processes of one environment asking for the same trace
        # (`make test` runs the main stage's files in two): the second waits
        # for the first's and reads it.
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._trace(args, python, path, run, timeout)
        data = json.loads(run.read_text())
        self._seen[key] = Traced(data["exit"], data["stderr"], path)
        return self._seen[key]

    @staticmethod
    def _trace(args: tuple, python: str | Path, path: Path, run: Path, timeout: float) -> None:
        if not run.exists():
            path.unlink(missing_ok=True)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            # Each mode in a worker of its own, as a user runs it: not
            # --in-process, where the fullgraph mode would start from the state
            # the explain mode left in the traced libraries (FlashInfer 0.6.3's
            # JIT registry then fails fullgraph at another call than a fresh
            # process does; tests/test_ingest.py compares with one).
            done = subprocess.run([str(python), "-m", "graphbreak_doctor", "trace", *args, "--json", str(path),
                                   "--no-html"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            run.write_text(json.dumps({"exit": done.returncode, "stderr": done.stderr}))


# Every findings, baseline, diff and matrix document a test leaves under the
# session's temporary folders or the shared traces is validated against its
# JSON Schema when the test ends (tests/schema_check.py).
def pytest_configure(config):
    import schema_check

    config.addinivalue_line("markers", schema_check.MARKER_HELP)


@pytest.fixture(autouse=True)
def _documents_match_their_schemas(request, tmp_path_factory):
    import schema_check

    yield
    problems = schema_check.after_test(request.node, [tmp_path_factory.getbasetemp(), os.environ.get(TRACES_ENV)])
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def traces(tmp_path_factory) -> Traces:
    folder = os.environ.get(TRACES_ENV)
    return Traces(Path(folder) if folder else tmp_path_factory.mktemp("traces"))


# FlashInfer's FP4 quantization wrapper on an emulated SM120, as .ci/run's gate traces it.
FP4_WRAPPER = ("--target", "fixtures.flashinfer_targets:fp4_quantize_wrapper", "--device", "sm120", "--mode", "both")
# The same, cold (no warm-up): a fresh process's first call, with the JIT
# builds and the first-call breaks (the registry, the stream's scratch
# buffer) that a warm-up takes away.
FP4_WRAPPER_COLD = (*FP4_WRAPPER, "--cold")


def other_flashinfer_python() -> Path | None:
    """The test environment with the other pinned FlashInfer (see the Makefile)."""
    import importlib.metadata

    name = ".venv" if importlib.metadata.version("flashinfer-python").startswith("0.6.") else ".venv-fi063"
    python = ROOT / name / "bin" / "python"
    return python if python.exists() else None


# --- golden files (tests/golden/): what a trace finds, committed for review ---------

UPDATE_GOLDEN = "GRAPHBREAK_DOCTOR_UPDATE_GOLDEN"


def golden_break(b) -> dict | None:
    """A break as a golden file holds it: no line numbers, so moved code does
    not change it; gb_type and the hit count, so a different break or a break
    hit more often does."""
    if b is None:
        return None
    function = b.actionable_frame.qualname if b.actionable_frame else ""
    return {"category": b.category, "function": function, "package": b.package, "gb_type": b.gb_type,
            "count": b.count}


def golden_summary(traced: Traced) -> dict:
    """The exit code, and a crash said in so many words: a golden file that
    expects one names it (its first line, paths left out); one that does not
    fails when the trace crashes."""
    import re

    findings = traced.findings
    if findings is None:  # exit 2: the error line, paths left out
        lines = [line for line in traced.stderr.splitlines() if line.startswith("graphbreak-doctor: error:")]
        return {"exit": traced.code, "error": re.sub(r"/\S+/", "", lines[-1]) if lines else ""}
    out: dict = {"exit": traced.code}
    if findings.fullgraph.crashed:
        first = (findings.fullgraph.error.splitlines() or [""])[0]
        out["crash"] = re.sub(r"0x[0-9a-f]+", "0x", re.sub(r"/\S+/", "", first))[:200]
    out.update({
        "fullgraph_ok": findings.fullgraph.ok,
        "fullgraph_first": golden_break(findings.break_by_id(findings.fullgraph.break_id)),
        "breaks": [golden_break(b) for b in findings.breaks],
    })
    return out


def check_golden(path: Path, got: dict) -> None:
    """``got`` must equal the golden file. With GRAPHBREAK_DOCTOR_UPDATE_GOLDEN=1
    a file that differs is rewritten and the test fails with what changed (run
    again to pass): a change is never taken in without being shown."""
    import difflib

    text = json.dumps(got, indent=2) + "\n"
    old = path.read_text() if path.exists() else ""
    if os.environ.get(UPDATE_GOLDEN) == "1":
        if text != old:
            path.write_text(text)
            diff = "".join(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                f"a/{path.name}", f"b/{path.name}"))
            pytest.fail(f"golden file rewritten ({UPDATE_GOLDEN}=1); what changed:\n{diff}", pytrace=False)
        return
    assert old, f"no golden file {path.name}; run with {UPDATE_GOLDEN}=1"
    assert got == json.loads(old)


# The matrix (tests/test_matrix.py, tests/test_matrix_ray.py): one reference
# matrix, run once and shared.
FI_OLD = "0.6.3"


def _installed(dist: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


FI_NEW = _installed("flashinfer-python")


def doctor(*args: str, cwd: Path, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "graphbreak_doctor", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def envs_dir() -> Path:
    """The doctor's own environments folder (graphbreak_doctor/cache.py): kept
    between runs, as `matrix` keeps them, and built from uv's cache; a second
    run of the tests builds nothing."""
    from graphbreak_doctor.matrix.envs import default_envs_dir

    return default_envs_dir()


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory, envs_dir):
    """One real matrix: the reference dense layer on FlashInfer 0.6.3 and the
    installed one, sm120 and sm100, two workers at a time."""
    out = tmp_path_factory.mktemp("matrix-out")
    start = time.monotonic()
    proc = doctor("matrix", "--layer", "dense", "--impl", "reference", "--flashinfer", f"{FI_OLD},{FI_NEW}",
                  "--device", "sm120,sm100", "--mode", "fullgraph", "--jobs", "2", "--envs", str(envs_dir),
                  "--json", str(out / "m.json"), "--html", str(out / "m.html"), cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out, time.monotonic() - start

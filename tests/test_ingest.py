"""`ingest`: what a real run left behind gives the same diagnosis as a live trace.

Every artifact read here is recorded at test time: the fixture targets run
under plain torch.compile, each mode in a child process of its own
(``fixtures.plain_compile --runs``: no capture or analysis code of the doctor
in it; one torch import, forked per run) with TORCH_TRACE or
TORCH_LOGS=graph_breaks set, and their fullgraph exceptions are taken from
that process's stderr, as a server prints them.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from graphbreak_doctor.capture.exceptions import CAPTURE_FAILURES
from graphbreak_doctor.diagnose import diagnose, target_builder
from graphbreak_doctor.model import Findings
from graphbreak_doctor.ingest import IngestError, ingest

ROOT = Path(__file__).resolve().parents[1]
BREAK_FIXTURES = sorted(p.stem for p in (ROOT / "fixtures" / "breaks").glob("*.py") if p.stem != "__init__")
FLASHINFER = importlib.metadata.version("flashinfer-python")
HAS_OP = not FLASHINFER.startswith("0.6.")


def record(spec: str, out: Path, *, mode: str = "both", emulate: str | None = None, logs: bool = False,
           extra: tuple[str, ...] = (), verbose: bool = False) -> Path:
    """Run ``spec`` under plain torch.compile, each mode in a process of its
    own; TORCH_TRACE goes to ``out/trace`` (or TORCH_LOGS=graph_breaks to
    ``out/graph_breaks.log``), its stderr -- the fullgraph exception -- to
    ``out/stderr.txt``."""
    runs = plain_runs(spec, out, mode=mode, emulate=emulate, logs=logs, extra=extra)
    run_plain(runs, verbose=verbose)
    return collect(out, runs, logs=logs)


def plain_runs(spec: str, out: Path, *, mode: str = "both", emulate: str | None = None, logs: bool = False,
               extra: tuple[str, ...] = ()) -> list[dict]:
    """The runs of ``fixtures.plain_compile --runs`` that record ``spec``:
    each mode in a process of its own, as the doctor traces them (a mode
    never sees the state the other left in FlashInfer)."""
    out.mkdir(parents=True, exist_ok=True)
    logging = {"TORCH_LOGS": "graph_breaks"} if logs else {"TORCH_TRACE": str(out / "trace")}
    runs = []
    for each in (["explain", "fullgraph"] if mode == "both" else [mode]):
        argv = [spec, "--mode", each, *(["--emulate", emulate] if emulate else []), *extra]
        runs.append({"argv": argv, "env": logging, "stderr": str(out / f"stderr-{each}.part")})
    return runs


def run_plain(runs: list[dict], *, verbose: bool = False) -> None:
    """The runs in a child process (``fixtures.plain_compile --runs``: one
    torch import, a process forked per run)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_TRACE", "TORCH_LOGS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if verbose:
        env["TORCHDYNAMO_VERBOSE"] = "1"
    listing = Path(runs[0]["stderr"]).with_name("runs.json")
    listing.write_text(json.dumps(runs))
    done = subprocess.run([sys.executable, "-m", "fixtures.plain_compile", "--runs", str(listing)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    listing.unlink()
    told = "".join(Path(r["stderr"]).read_text()[-2000:] for r in runs if Path(r["stderr"]).exists())
    assert done.returncode == 0, done.stderr[-3000:] + told[-6000:]


def collect(out: Path, runs: list[dict], *, logs: bool = False) -> Path:
    """The runs' stderr, in order, as one file in ``out``."""
    stderr = []
    for run in runs:
        part = Path(run["stderr"])
        stderr.append(part.read_text())
        part.unlink()
        assert "graphbreak_doctor.capture" not in stderr[-1]
    (out / ("graph_breaks.log" if logs else "stderr.txt")).write_text("".join(stderr))
    return out


def explain_trace(out: Path) -> Path:
    """The TORCH_TRACE file of the explain-mode run (the one with the most
    graph-break reports; each mode is recorded in a process of its own)."""
    return max(sorted((out / "trace").iterdir()), key=lambda p: p.read_text().count("dynamo_graph_break_reason"))


def shape(findings: Findings, modes: tuple[str, ...] = ("explain", "fullgraph")) -> list[tuple]:
    """What must match: category, gb_type and the frame to change, in order."""
    out = []
    for b in findings.breaks:
        if not set(b.modes) & set(modes):
            continue
        act = b.actionable_frame
        out.append((b.category, b.gb_type, b.package, act.file if act else None, act.line if act else None,
                    act.qualname if act else None))
    return out


def modes_read_back(b) -> list[str]:
    """The modes a log gives a live break: a capture failure that is not an
    ``Unsupported`` is thrown whether or not the compile had fullgraph=True,
    and a log does not say which it had, so it reads back as a fullgraph
    failure (what a thrown error is)."""
    if b.exceptions and b.exceptions[0] in CAPTURE_FAILURES:
        return ["fullgraph"]
    return b.modes


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("recorded")
    runs = {name: plain_runs(f"fixtures.breaks.{name}:target", base / name) for name in BREAK_FIXTURES}
    run_plain([run for each in runs.values() for run in each])
    return {name: collect(base / name, each) for name, each in runs.items()}


@pytest.fixture(scope="module")
def live() -> dict[str, Findings]:
    return {name: diagnose(target_builder(f"fixtures.breaks.{name}:target"), mode="both", device="cpu")
            for name in BREAK_FIXTURES}


@pytest.mark.parametrize("name", BREAK_FIXTURES)
def test_torch_trace_round_trip(recorded, live, name):
    traced = live[name]
    ingested = ingest([str(recorded[name] / "trace")])
    assert shape(ingested) == shape(traced)
    assert [modes_read_back(b) for b in traced.breaks] == [b.modes for b in ingested.breaks]
    assert ingested.unparsed_events == []
    assert ingested.target.facts["ingested"]["format"] == "torch-trace"
    if traced.breaks:
        assert ingested.fullgraph.ran and ingested.fullgraph.ok is False
        assert ingested.fullgraph.break_id == traced.fullgraph.break_id


@pytest.mark.parametrize("name", BREAK_FIXTURES)
def test_fullgraph_exception_text_round_trip(recorded, live, name):
    ingested = ingest([str(recorded[name] / "stderr.txt")])
    assert shape(ingested) == shape(live[name], modes=("fullgraph",))
    assert ingested.unparsed_events == []
    if live[name].breaks:
        assert ingested.modes == ["fullgraph"] and ingested.fullgraph.ok is False
        assert ingested.fullgraph.break_id == live[name].fullgraph.break_id
    else:
        assert ingested.breaks == [] and ingested.modes == []


@pytest.mark.parametrize("name", ["subprocess_call", "filesystem_pathstat", "logging_calls", "builtin_namespace"])
def test_log_from_another_machine(recorded, live, tmp_path, name):
    """A log copied off a server names that machine's Python and project paths."""
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    text = (recorded[name] / "stderr.txt").read_text()
    moved = tmp_path / "server.txt"
    moved.write_text(text.replace(stdlib + "/", "/usr/lib/python3.10/").replace(str(ROOT) + "/", "/srv/app/"))
    ingested = ingest([str(moved)])
    assert "/srv/app/fixtures/breaks/" in ingested.breaks[0].actionable_frame.file
    want = [(b.category, b.gb_type, b.actionable_frame.function) for b in live[name].breaks if "fullgraph" in b.modes]
    assert [(b.category, b.gb_type, b.actionable_frame.function) for b in ingested.breaks] == want


def test_graph_breaks_log_round_trip(tmp_path, live):
    """TORCH_LOGS=graph_breaks output: every handled break, as explain mode sees them."""
    out = record("fixtures.breaks.logging_calls:target", tmp_path, mode="explain", logs=True)
    ingested = ingest([str(out / "graph_breaks.log")])
    assert shape(ingested) == shape(live["logging_calls"], modes=("explain",))
    assert ingested.modes == ["explain"]


def test_verbose_output_round_trip(tmp_path, live):
    """TORCHDYNAMO_VERBOSE=1 adds Dynamo's own stack, the frames above the
    compiled function and the last bytecodes traced to each report."""
    spec = "fixtures.breaks.logging_calls:target"
    logs = record(spec, tmp_path / "logs", mode="explain", logs=True, verbose=True) / "graph_breaks.log"
    assert "most recent `torch.compile` tracing attempt started here" in logs.read_text()
    assert shape(ingest([str(logs)])) == shape(live["logging_calls"], modes=("explain",))
    out = record(spec, tmp_path / "trace", verbose=True)
    assert shape(ingest([str(out / "trace")])) == shape(live["logging_calls"])
    assert shape(ingest([str(out / "stderr.txt")])) == shape(live["logging_calls"], modes=("fullgraph",))


def test_repeated_breaks_are_counted_like_a_live_trace(tmp_path):
    """Dynamo logs a repeated break without its stack; both forms count."""
    spec = "fixtures.many_breaks:target"
    traced = diagnose(target_builder(spec), mode="explain", device="cpu")
    trace = ingest([str(record(spec, tmp_path / "trace", mode="explain") / "trace")])
    logged = ingest([str(record(spec, tmp_path / "logs", mode="explain", logs=True) / "graph_breaks.log")])
    want = [(s, b.count) for s, b in zip(shape(traced), traced.breaks)]
    assert [(s, b.count) for s, b in zip(shape(trace), trace.breaks)] == want
    assert [(s, b.count) for s, b in zip(shape(logged), logged.breaks)] == want


def trace_in_a_fresh_process(traces, spec: str, device: str) -> Findings:
    """`graphbreak-doctor trace --cold` in a process of its own (the session's
    traces): FlashInfer keeps state between calls (its AutoTuner singleton
    breaks on a lock only when it is created), so both sides start from a
    fresh process, and neither warms the target up first."""
    done = traces.get("--target", spec, "--device", device, "--mode", "both", "--cold")
    # 3: Dynamo crashed after the breaks (FlashInfer 0.6.3's AutoTuner in explain mode).
    assert done.code in (0, 3) and done.findings is not None, done.stderr[-3000:]
    return done.findings


# The reader is the doctor's, whatever the FlashInfer release: the user's
# story's entry points on both releases, the wider set on the current one.
WIDER = (pytest.mark.slow, pytest.mark.one_flashinfer)
FLASHINFER_TARGETS = [
    ("fp4_quantize_wrapper", "sm120"),
    ("fp4_quantize_op", "sm120"),
    pytest.param("mm_fp4_dense", "sm120", marks=WIDER),
    pytest.param("fused_topk_deepseek_glm5", "sm120", marks=WIDER),
    pytest.param("cutlass_fused_moe_glm5", "sm120", marks=WIDER),
    pytest.param("mm_fp4_cutlass", "sm100", marks=WIDER),
    pytest.param("trtllm_fp4_block_scale_moe_glm5", "sm100", marks=WIDER),
]


@pytest.mark.flashinfer_version
@pytest.mark.parametrize("factory,device", FLASHINFER_TARGETS)
def test_flashinfer_round_trip_on_emulated_devices(traces, tmp_path, factory, device):
    if factory == "fp4_quantize_op" and not HAS_OP:
        pytest.skip("torch.ops.flashinfer.fp4_quantize exists from flashinfer 0.7")
    spec = f"fixtures.flashinfer_targets:{factory}"
    traced = trace_in_a_fresh_process(traces, spec, device)
    out = record(spec, tmp_path / "run", emulate=device)
    ingested = ingest([str(out / "trace")])
    assert shape(ingested) == shape(traced)
    assert ingested.fullgraph.crashed == traced.fullgraph.crashed
    assert shape(ingest([str(out / "stderr.txt")])) == shape(traced, modes=("fullgraph",))


# ------------------------------------------------------------ server logs

NOISE_WORDS = "scheduler decode prefill batch token cache radix tree memory pool request latency throughput".split()


def noise_lines(count: int, rng: random.Random) -> list[str]:
    """Unrelated server output, some of it close to what the doctor looks for."""
    out = []
    for i in range(count):
        kind = rng.randrange(10)
        words = " ".join(rng.choice(NOISE_WORDS) for _ in range(rng.randrange(3, 12)))
        if kind == 0:
            out += ["Traceback (most recent call last):", f'  File "/srv/app/worker.py", line {i}, in handle',
                    "    raise ValueError(msg)", f"ValueError: {words}"]
        elif kind == 1:
            out.append(f"\x1b[32m[2026-01-01 00:00:{i % 60:02d} TP{i % 4}]\x1b[0m Decode batch. #running-req: {i % 7}, {words}")
        elif kind == 2:
            out.append(f"V1201 00:00:00.{i:06d} 4242 torch/_dynamo/guards.py:4552] [0/0] [__guards] GUARDS: {words}")
        elif kind == 3:
            out.append(f"INFO: a graph break in user code is expected here according to {words}")
        elif kind == 4:
            out.append("")
        else:
            out.append(f"[2026-01-01 00:00:{i % 60:02d}] {words}")
    return out[:count]


@pytest.fixture(scope="module")
def server_log(recorded, tmp_path_factory) -> Path:
    """10,000 lines of server output around three different fullgraph failures,
    with ANSI colours and Windows line endings."""
    rng = random.Random(12)
    failures = [recorded[name] / "stderr.txt" for name in ("subprocess_call", "logging_calls", "data_dependent")]
    lines = noise_lines(10_000, rng)
    for i, path in enumerate(failures):
        at = (i + 1) * len(lines) // 4
        lines[at:at] = ["\x1b[31m" + line + "\x1b[0m" if "Unsupported" in line else line
                        for line in path.read_text().splitlines()]
    path = tmp_path_factory.mktemp("server") / "server.log"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return path


def test_server_log_with_three_failures_finds_exactly_three(server_log, live):
    findings = ingest([str(server_log)])
    want = [shape(live[n], modes=("fullgraph",))[0] for n in ("subprocess_call", "logging_calls", "data_dependent")]
    assert shape(findings) == want
    assert findings.unparsed_events == []
    assert findings.target.facts["ingested"]["format"] == "text"


def test_sglang_server_log_counts_the_failure_once(tmp_path, live):
    """SGLang re-raises the Unsupported inside a new exception whose message
    repeats it, and logs the whole chain: one failure, one break."""
    out = record("fixtures.breaks.filesystem_pathstat:target", tmp_path, mode="fullgraph", extra=("--as-sglang",))
    text = (out / "stderr.txt").read_text()
    assert "Capture cuda graph failed: Attempted to call function marked as skipped" in text
    findings = ingest([str(out / "stderr.txt")])
    assert shape(findings) == shape(live["filesystem_pathstat"], modes=("fullgraph",))
    assert findings.breaks[0].count == 1 and findings.unparsed_events == []


def test_gzip_and_zstd_inputs(server_log, tmp_path, recorded):
    packed = tmp_path / "server.log.gz"
    packed.write_bytes(gzip.compress(server_log.read_bytes()))
    assert shape(ingest([str(packed)])) == shape(ingest([str(server_log)]))
    trace_file = explain_trace(recorded["subprocess_call"])
    gz_trace = tmp_path / "trace.log.gz"
    gz_trace.write_bytes(gzip.compress(trace_file.read_bytes()))
    assert shape(ingest([str(gz_trace)])) == shape(ingest([str(trace_file)]))
    assert ingest([str(gz_trace)]).target.facts["ingested"]["files"][0]["compression"] == "gzip"
    try:
        import zstandard
    except ImportError:
        zst = tmp_path / "server.log.zst"
        zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)
        with pytest.raises(IngestError, match="needs the 'zstandard' package"):
            ingest([str(zst)])
        return
    zst = tmp_path / "server.log.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(server_log.read_bytes()))
    assert shape(ingest([str(zst)])) == shape(ingest([str(server_log)]))


def test_compressed_file_that_breaks_off_keeps_what_came_before(server_log, tmp_path, live):
    packed = gzip.compress(server_log.read_bytes())
    cut = tmp_path / "server.log.gz"
    cut.write_bytes(packed[: len(packed) * 2 // 3])
    findings = ingest([str(cut)])
    assert shape(findings) == [shape(live[n], modes=("fullgraph",))[0] for n in ("subprocess_call", "logging_calls")]
    assert [u.reason.split(" (")[0] for u in findings.unparsed_events] == ["the file ends early"]


def test_ranks_are_recorded_per_file(recorded, tmp_path):
    src = explain_trace(recorded["subprocess_call"])
    folder = tmp_path / "tt"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(src, folder / f"dedicated_log_torch_trace_rank_{rank}_x{rank}.log")
    findings = ingest([str(folder)])
    info = findings.target.facts["ingested"]
    assert info["ranks"] == [0, 1]
    assert [f["rank"] for f in info["files"]] == [0, 1]
    assert all(f["breaks"] == [findings.breaks[0].id] for f in info["files"])
    assert findings.breaks[0].count == 2 * ingest([str(src)]).breaks[0].count
    # torchrun prefixes every line of a rank's output with "[rankN]:".
    text = tmp_path / "rank3.log"
    text.write_text("".join(f"[rank3]:{line}\n" for line in (recorded["logging_calls"] / "stderr.txt").read_text().splitlines()))
    findings = ingest([str(text)])
    assert findings.target.facts["ingested"]["ranks"] == [3] and len(findings.breaks) == 1


# VmHWM, not ru_maxrss: Linux carries a forked parent's peak over into the
# child's ru_maxrss across exec, and the pytest process is large.
_PEAK_RSS = """
import sys
from graphbreak_doctor.ingest import ingest
findings = ingest([sys.argv[1]])
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(len(findings.breaks), peak.split()[1])
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak RSS from Linux's /proc")
def test_memory_does_not_grow_with_the_trace(recorded, tmp_path):
    first = explain_trace(recorded["hostile_text"])
    src = first.read_bytes()
    distinct = len(ingest([str(first)]).breaks)
    assert distinct >= 1
    peaks = []
    for name, megabytes in (("small", 8), ("big", 160)):
        path = tmp_path / f"dedicated_log_torch_trace_{name}.log"
        path.write_bytes(src * (megabytes * 1_000_000 // len(src) + 1))
        done = subprocess.run([sys.executable, "-c", _PEAK_RSS, str(path)], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        breaks, kilobytes = map(int, done.stdout.split())
        assert breaks == distinct
        peaks.append(kilobytes)
    assert peaks[1] - peaks[0] < 40 * 1024, peaks


# ------------------------------------------------------------ bad input

def test_truncated_trace_reports_what_it_could_not_parse(recorded, tmp_path):
    src = explain_trace(recorded["logging_calls"])
    lines = src.read_text().splitlines(keepends=True)
    # Cut inside the second graph break's report, before its user code.
    second = [i for i, line in enumerate(lines) if "dynamo_graph_break_reason" in line][1]
    cut = tmp_path / "cut.log"
    cut.write_text("".join(lines[:second + 4]))
    findings = ingest([str(cut)])
    assert len(findings.breaks) == 1 and findings.breaks[0].category == "logging"
    assert len(findings.unparsed_events) == 1
    u = findings.unparsed_events[0]
    assert "cut short" in u.reason and u.source == f"{cut}:{second + 1}"
    assert u.excerpt.splitlines()[0].startswith("Graph break in user code at")
    # A record cut in the middle of its JSON.
    cut.write_text("".join(lines[:second]) + lines[second][: lines[second].index("dynamo_graph_break_reason") + 40] + "\n")
    findings = ingest([str(cut)])
    assert [u.reason for u in findings.unparsed_events] == ["a TORCH_TRACE record that is not valid JSON (cut short?)"]


def test_cli_truncated_trace_lists_unparsed_and_exits_0(cli, recorded, tmp_path):
    src = explain_trace(recorded["subprocess_call"])
    text = src.read_text()
    cut = tmp_path / "cut.log"
    cut.write_text(text[: text.index("User code traceback:")])
    out = tmp_path / "f.json"
    result = cli("ingest", str(cut), "--json", str(out), "--no-html")
    assert result.returncode == 0, result.stderr
    assert "NOT PARSED" in result.stdout and "cut short" in result.stdout
    assert "Traceback" not in result.stderr
    assert json.loads(out.read_text())["unparsed_events"][0]["source"].startswith(str(cut))


@pytest.mark.parametrize("case", ["binary", "empty-folder", "missing", "sparse-2GB", "bad-gzip"])
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, case):
    path = tmp_path / case
    if case == "binary":
        path.write_bytes(bytes(random.Random(1).randrange(256) for _ in range(50_000)) + b"\x00")
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + path.read_bytes())
    elif case == "empty-folder":
        path.mkdir()
    elif case == "sparse-2GB":
        with open(path, "wb") as f:
            f.truncate(2 * 1024**3)
    elif case == "bad-gzip":
        path.write_bytes(b"\x1f\x8b" + b"not really gzip" * 10)
    out = tmp_path / "f.json"
    result = cli("ingest", str(path), "--json", str(out), "--no-html")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphbreak-doctor: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_a_binary_file_in_a_trace_folder_is_skipped_and_said(recorded, tmp_path):
    folder = tmp_path / "tt"
    shutil.copytree(recorded["subprocess_call"] / "trace", folder)
    (folder / "core.bin").write_bytes(b"\x7fELF\x00\x00" * 100)
    findings = ingest([str(folder)])
    assert [b.category for b in findings.breaks] == ["subprocess"]
    assert [u.source for u in findings.unparsed_events] == [str(folder / "core.bin")]
    assert "binary file" in findings.unparsed_events[0].reason
    assert findings.target.facts["ingested"]["format"] == "torch-trace"


def test_noise_without_newlines_is_a_finding_less_report(cli, tmp_path):
    noise = tmp_path / "noise.txt"
    rng = random.Random(3)
    with open(noise, "w") as f:
        for _ in range(40):
            f.write("".join(rng.choice("abcdef ghij{}[]:") for _ in range(1 << 18)))
    out = tmp_path / "f.json"
    result = cli("ingest", str(noise), "--json", str(out), "--no-html")
    assert result.returncode == 0, result.stderr
    assert "nothing found" in result.stdout
    data = json.loads(out.read_text())
    assert data["breaks"] == [] and data["unparsed_events"] == []


def test_same_input_gives_identical_json(cli, recorded, tmp_path):
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    for out in outs:
        result = cli("ingest", str(recorded["hostile_text"] / "trace"), "--json", str(out), "--no-html")
        assert result.returncode == 0, result.stderr
    assert outs[0].read_bytes() == outs[1].read_bytes()
    data = json.loads(outs[0].read_text())
    assert data["target"]["spec"] == f"ingest:{recorded['hostile_text'] / 'trace'}"
    assert data["target"]["facts"]["ingested"]["frames"]


def test_check_and_baseline_from_an_ingested_run(cli, recorded, tmp_path):
    base = tmp_path / "b.json"
    fullgraph_text = str(recorded["logging_calls"] / "stderr.txt")
    trace = str(recorded["logging_calls"] / "trace")
    result = cli("baseline", "write", "--from", fullgraph_text, "-o", str(base))
    assert result.returncode == 0, result.stderr
    # The trace has the print() break the fullgraph exception does not show.
    result = cli("check", "--from", trace, "--baseline", str(base))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 break not in the baseline" in result.stdout and "[logging]" in result.stdout
    result = cli("check", "--from", fullgraph_text, "--baseline", str(base))
    assert result.returncode == 0, result.stdout + result.stderr
    result = cli("check", "--from", fullgraph_text, "--require-fullgraph")
    assert result.returncode == 1
    result = cli("check", "--from", trace, "--target", "fixtures.breaks.clean:target")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


_FORBIDDEN_PROGRAM = """
import torch

def layer(x):
    cache = x * 2
    torch._dynamo.mark_static_address(cache)
    return cache + 1

torch.compile(layer, fullgraph=True, backend="eager")(torch.ones(3))
"""


def test_a_forbidden_call_in_a_plain_compiles_output_is_that_failure(tmp_path):
    """A plain fullgraph compile stops at `mark_static_address` with a bare
    AssertionError in Dynamo's words: read back, it is the forbidden-call
    failure the live trace reports, at the user's line -- not nothing."""
    (tmp_path / "program.py").write_text(_FORBIDDEN_PROGRAM)
    done = subprocess.run([sys.executable, "program.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "AssertionError: Attempt to trace forbidden callable" in done.stderr
    (tmp_path / "run.log").write_text(done.stderr)
    findings = ingest([str(tmp_path / "run.log")])
    (brk,) = findings.breaks
    assert (brk.category, brk.gb_type) == ("forbidden-call", "Attempt to trace forbidden callable")
    assert brk.site.file.endswith("program.py") and brk.site.line == 6
    assert "mark_static_address" in brk.site.code
    assert brk.fix.recipe == "skip-when-compiling"

"""How many graph breaks the fix ladder removes from public models it was not built on.

For each model of ``benchmarks/fix_rate_models.py`` (the breaking models of a
public graph-break corpus, built as that corpus builds them):

1. **before**, in a fresh process: the model's forward is run eagerly, then
   ``torch.compile(fullgraph=True, backend="eager")`` (the corpus's
   settings); a model that compiles whole is *clean* here and leaves the
   rates. Otherwise the breaks ``torch._dynamo.explain`` counts (plain, as
   the corpus counts them; and with ``capture_scalar_outputs`` and
   ``capture_dynamic_output_shape_ops`` on, as a fullgraph capture meets
   them), and, with those options too, the share of the eager forward's
   operators that run inside compiled graphs (a plain ``torch.compile``, the
   second call counted: ``graphbreak_doctor/capture/held_ops.py``; at most
   100%: a graph may dispatch a few more operators than eager);
2. ``graphbreak-doctor fix --target benchmarks.fix_rate_models:NAME --device
   cpu --write-patch DIR``: the ladder, and the patch only where its own
   fresh-process proof passed;
3. **after**, in a fresh process with ``PYTHONPATH=DIR`` (the patch loaded
   as a server loads it; of the doctor's, only its operator count and its
   output comparison, ``fix/outputs.py``, are in the process): the same
   measures, and the proof -- a fullgraph compile whose outputs equal
   eager's, again after ``torch._dynamo.reset()``. No patch: after is before.

A model is *fixed* when after proves fullgraph, outputs equal eager both
times, and the share of operators in graphs did not fall; its breaks are all
removed. Otherwise breaks removed are the fall of the plain count, and only
from a model whose patch was written. A model whose fullgraph compile fails
counts at least one break before, where explain counts none. The table groups the
models by the category of the first failure the doctor found, and reports
the held-out half (a fixed hash of the model's name: no rung was tuned on
it) apart from the other.

    .venv/bin/python benchmarks/fix_rate.py --jobs 2            # every model, resumable
    .venv/bin/python benchmarks/fix_rate.py --models BartModel,MambaModel
    .venv/bin/python benchmarks/fix_rate.py --table              # the table from saved results
    .venv/bin/python benchmarks/fix_rate.py --remeasure --jobs 2 # before and after again, ladders kept

Results go to ``reports/fix-rate/`` (``results.jsonl``, one line per model,
and the findings, logs and patches per model); a model already there is not
run again unless ``--redo``. The anchor: GraphMend removes 107 of 147
breaks (73%) and fully fixes 21 of 27 models (its paper).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reports" / "fix-rate"
TARGET = "benchmarks.fix_rate_models:{}"
# The categories the ladder's rungs for code nobody here wrote are measured
# on: logging, a trace that crashes or calls what torch forbids, what no rule
# knows, and calls Dynamo cannot trace that take or return no tensors.
FOCUS = ("logging", "crash", "forbidden-call", "other", "opaque-call")


def held_out(name: str) -> bool:
    """The held-out half: a fixed hash of the name, never a choice."""
    return hashlib.sha256(name.encode()).digest()[0] % 2 == 1


# --- the measuring process ---------------------------------------------------

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def probe(name: str) -> dict:
    """Measures one model in this (fresh) process: a JSON-able dict."""
    import torch

    from benchmarks import fix_rate_models
    from graphbreak_doctor.capture.held_ops import GraphOps, eager_ops
    from graphbreak_doctor.fix.outputs import same
    from graphbreak_doctor.patching import UndoLog

    torch.set_num_threads(1)
    result: dict = {"model": name}
    try:
        fn, args, kwargs = fix_rate_models.target(name)
        expected = fn(*args, **kwargs)
    except Exception as exc:  # the model itself: reported, never fixed
        result["error"] = "build or eager: " + _first_line(exc)
        return result

    def fullgraph() -> tuple[bool, str]:
        torch._dynamo.reset()
        try:
            got = torch.compile(fn, fullgraph=True, backend="eager")(*args, **kwargs)
        except Exception as exc:
            return False, _first_line(exc)
        return (True, "") if same(got, expected) else (False, "outputs differ from eager")

    ok, error = fullgraph()
    result["fullgraph"], result["fullgraph_error"] = ok, error
    if ok:
        again, error = fullgraph()
        result["after_reset"] = again
        if not again:
            result["fullgraph_error"] = "after torch._dynamo.reset(): " + error
    def explain(key: str) -> None:
        torch._dynamo.reset()
        try:
            explained = torch._dynamo.explain(fn)(*args, **kwargs)
            result[key] = explained.graph_break_count
            result.setdefault("reasons", sorted({str(b.reason).splitlines()[0][:160]
                                                 for b in explained.break_reasons}))
        except Exception as exc:
            result[key] = None
            result.setdefault("explain_error", _first_line(exc))

    # As the corpus counts them: plain explain mode.
    explain("breaks_plain")
    # As a fullgraph capture meets them: it keeps scalar outputs and
    # data-dependent sizes in the graph whatever these options say, so they
    # are on for the count and the operator share (as in the fix ladder).
    with UndoLog() as options:
        options.set_option(torch._dynamo.config, "capture_scalar_outputs", True)
        options.set_option(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)
        explain("breaks")
        torch._dynamo.reset()
        graphs = GraphOps()
        try:
            compiled = torch.compile(fn, backend=lambda gm, example: graphs.wrap(gm.forward))
            compiled(*args, **kwargs)
            with graphs.counting():
                compiled(*args, **kwargs)
            result["ops_held"], result["ops_total"] = graphs.n, eager_ops(fn, args, kwargs)
        except Exception as exc:
            result["ops_error"] = _first_line(exc)
    return result


# --- the driver --------------------------------------------------------------

def _env(patch: Path | None) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # The patch folder first: its sitecustomize loads the patch at start-up.
    paths = ([str(patch)] if patch is not None else []) + [str(ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["GRAPHBREAK_DOCTOR_NO_CACHE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run_probe(name: str, patch: Path | None, timeout: float, log: Path) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--probe", name]
    try:
        done = subprocess.run(command, cwd=ROOT, env=_env(patch), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "error": f"measuring timed out after {timeout:.0f} s"}
    log.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [""])[-1][:300]
        return {"model": name, "error": f"measuring exited {done.returncode}: {tail}"}
    return json.loads(lines[-1])


def _first_failure(findings: dict) -> str:
    """The category of the first failure the doctor found, from its findings."""
    ladder = findings.get("ladder") or []
    if ladder:
        return ladder[0].get("category") or "uncategorised"
    fullgraph = findings.get("fullgraph") or {}
    if fullgraph.get("crashed"):
        return "crash"
    for brk in findings.get("breaks") or []:
        if brk.get("id") == fullgraph.get("break_id"):
            return brk.get("category") or "uncategorised"
    return "none" if fullgraph.get("ok") else "uncategorised"


def run_model(name: str, out: Path, timeout: float) -> dict:
    started = time.monotonic()
    work = out / "models" / name
    if work.exists():  # measured before (--redo): measured again from nothing
        shutil.rmtree(work)
    work.mkdir(parents=True)
    record: dict = {"model": name, "held_out": held_out(name)}
    before = _run_probe(name, None, timeout, work / "before.log")
    record["before"] = before
    if "error" in before or before.get("fullgraph"):
        record["status"] = "not built" if "error" in before else "clean"
        record["seconds"] = round(time.monotonic() - started, 1)
        return record
    patch, findings_path = work / "patch", work / "findings.json"
    command = [sys.executable, "-m", "graphbreak_doctor", "fix", "--target", TARGET.format(name),
               "--device", "cpu", "--write-patch", str(patch), "--json", str(findings_path),
               "--no-html", "--timeout", str(int(timeout))]
    try:
        done = subprocess.run(command, cwd=ROOT, env=_env(None), capture_output=True, text=True,
                              timeout=timeout * 4)
        (work / "fix.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
        record["fix_exit"] = done.returncode
        record["fix_message"] = (done.stderr.strip().splitlines() or [""])[-1][:300]
    except subprocess.TimeoutExpired:
        record["fix_exit"], record["fix_message"] = None, f"fix timed out after {timeout * 4:.0f} s"
    findings = json.loads(findings_path.read_text()) if findings_path.is_file() else {}
    record["category"] = _first_failure(findings) if findings else "no findings"
    record["rungs"] = [{"recipe": r.get("recipe"), "category": r.get("category"), "result": r.get("result")}
                       for r in findings.get("ladder") or []]
    fix = findings.get("fix") or {}
    record["ladder_ok"], record["stopped"] = bool(fix.get("ok")), (fix.get("stopped") or "")[:300]
    written = patch.is_dir()
    record["patch_written"] = written
    after = _run_probe(name, patch, timeout, work / "after.log") if written else before
    record["after"] = after
    record["status"] = _status(before, after, written)
    record["seconds"] = round(time.monotonic() - started, 1)
    return record


def remeasure(record: dict, out: Path, timeout: float) -> dict:
    """``record`` with its before and after measured again (the ladder and
    its patch kept): for a change to the measures alone."""
    started = time.monotonic()
    name, work = record["model"], out / "models" / record["model"]
    record = dict(record, before=_run_probe(name, None, timeout, work / "before.log"))
    if "error" in record["before"] or record["before"].get("fullgraph"):
        record["status"] = "not built" if "error" in record["before"] else "clean"
    else:
        patch = work / "patch"
        record["after"] = (_run_probe(name, patch, timeout, work / "after.log") if record.get("patch_written")
                           else record["before"])
        record["status"] = _status(record["before"], record["after"], bool(record.get("patch_written")))
    record["seconds"] = round(record.get("seconds", 0) + time.monotonic() - started, 1)
    return record


def _share(probe_result: dict) -> float | None:
    """Operators in graphs over a plain call's (at most 1: a graph may run a
    few more operators than eager for the same work)."""
    held, total = probe_result.get("ops_held"), probe_result.get("ops_total")
    return min(held / total, 1.0) if held is not None and total else None


def _status(before: dict, after: dict, written: bool) -> str:
    if not written:
        return "not fixed"
    if "error" in after:
        return "patch breaks the model"
    share_before, share_after = _share(before), _share(after)
    kept = share_after is not None and (share_before is None or share_after >= share_before - 1e-9)
    if after.get("fullgraph") and after.get("after_reset") and kept:
        return "fixed"
    return "partly fixed" if (after.get("breaks") or 0) < (before.get("breaks") or 0) else "not fixed"


def removed(record: dict) -> tuple[int, int]:
    """(breaks removed, breaks before) of one breaking model."""
    # The fullgraph failure is one, where explain counts none (it crashed,
    # or the failure is one only a fullgraph capture meets).
    before = max(_plain(record["before"]) or 0, 1)
    if record["status"] == "fixed":
        return before, before
    if not record.get("patch_written"):
        return 0, before
    after = _plain(record["after"])
    return (max(before - after, 0) if after is not None else 0), before


def _plain(probe_result: dict) -> int | None:
    """The breaks plain explain mode counts (as the corpus counts them)."""
    return probe_result.get("breaks_plain", probe_result.get("breaks"))


# --- the table ----------------------------------------------------------------

def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def _totals(records: list[dict]) -> tuple[str, str]:
    gone = sum(removed(r)[0] for r in records)
    total = sum(removed(r)[1] for r in records)
    fixed = sum(r["status"] == "fixed" for r in records)
    return _pct(gone, total), _pct(fixed, len(records))


def table(records: list[dict]) -> str:
    breaking = [r for r in records if r["status"] not in ("clean", "not built")]
    lines = ["| model | half | first failure | breaks (explain) before -> after | ops in graphs before -> after | "
             "status | rungs (recipe: result) |", "|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r.get("category", ""), r["model"])):
        half = "held-out" if r["held_out"] else "tuning"
        if r["status"] in ("clean", "not built"):
            why = r["before"].get("error", "fullgraph ok on this torch")
            lines.append(f"| {r['model']} | {half} | - | - | - | {r['status']} | {why[:90]} |")
            continue
        b, a = r["before"], r["after"]
        sb, sa = _share(b), _share(a)
        shares = f"{sb:.0%} -> {sa:.0%}" if sb is not None and sa is not None else "-"
        rungs = "; ".join(f"{x['recipe']}: {x['result']}" for x in r["rungs"]) or r.get("stopped", "")[:90]
        def count(p: dict) -> str:
            return "?" if _plain(p) is None else str(_plain(p))  # explain itself failed

        after = "0 (fullgraph)" if r["status"] == "fixed" else count(a)
        lines.append(f"| {r['model']} | {half} | {r['category']} | {count(b)} -> {after} | "
                     f"{shares} | {r['status']} | {rungs} |")
    lines += ["", "| models | breaking | breaks removed | models fixed |", "|---|---|---|---|"]

    def row(label: str, group: list[dict]) -> None:
        gone, fixed = _totals(group)
        lines.append(f"| {label} | {len(group)} | {gone} | {fixed} |")

    row("all", breaking)
    row("tuning half", [r for r in breaking if not r["held_out"]])
    row("held-out half", [r for r in breaking if r["held_out"]])
    focus = [r for r in breaking if r["category"] in FOCUS]
    row("first failure in " + ", ".join(FOCUS), focus)
    row("  of them, held-out", [r for r in focus if r["held_out"]])
    for category in sorted({r["category"] for r in breaking}):
        row(f"category {category}", [r for r in breaking if r["category"] == category])
    counts = {s: sum(r["status"] == s for r in records) for s in ("clean", "not built")}
    lines += ["", f"{len(records)} models measured: {len(breaking)} break, {counts['clean']} clean on this "
              f"torch, {counts['not built']} not built. GraphMend (the anchor): 107/147 (73%) breaks, "
              "21/27 models."]
    return "\n".join(lines)


def load(out: Path) -> dict[str, dict]:
    path = out / "results.jsonl"
    records: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                records[record["model"]] = record
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated model names (default: all of them)")
    parser.add_argument("--jobs", type=int, default=1, help="models measured at once (default 1)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"results folder (default {OUT})")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds per measuring process (the ladder gets four times as long)")
    parser.add_argument("--redo", action="store_true", help="measure models already in the results again")
    parser.add_argument("--table", action="store_true", help="print the table of saved results only")
    parser.add_argument("--remeasure", action="store_true",
                        help="measure the saved breaking models again, keeping their ladders and patches")
    parser.add_argument("--probe", metavar="NAME", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        sys.path.insert(0, str(ROOT))
        print(json.dumps(probe(args.probe)))
        return 0
    sys.path.insert(0, str(ROOT))
    from benchmarks.fix_rate_models import MODELS

    names = args.models.split(",") if args.models else list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"fix_rate: not a benchmark model: {', '.join(unknown)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    done = load(args.out)
    if not args.table:
        if args.remeasure:
            todo = [n for n in names if n in done and done[n]["status"] not in ("clean", "not built")]
            job = lambda n: remeasure(done[n], args.out, args.timeout)  # noqa: E731
        else:
            todo = [n for n in names if args.redo or n not in done]
            job = lambda n: run_model(n, args.out, args.timeout)  # noqa: E731
        with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool, \
                (args.out / "results.jsonl").open("a") as sink:
            futures = {pool.submit(job, n): n for n in todo}
            for future in concurrent.futures.as_completed(futures):
                record = future.result()
                sink.write(json.dumps(record) + "\n")
                sink.flush()
                done[record["model"]] = record
                print(f"{record['model']}: {record['status']} ({record.get('category', '-')}, "
                      f"{record['seconds']} s)", file=sys.stderr, flush=True)
    print(table([done[n] for n in names if n in done]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast `ingest` reads a large TORCH_TRACE, beside tlparse on the same file.

    python benchmarks/ingest_speed.py [--size-mb 200] [--tlparse PATH] [--keep DIR]

Records a real TORCH_TRACE first (fixtures.many_breaks under plain
torch.compile, explain then fullgraph: twenty-odd graph breaks, graphs,
compilation metrics), then repeats its records until the file is at least
``--size-mb`` MB, so every line is one PyTorch wrote. Each tool runs in a child
process of its own; the table shows wall time, MB/s and the child's peak RSS:

- ``ingest()``: the doctor reading and analysing the file, timed inside the
  process (the torch import is not counted);
- ``graphbreak-doctor ingest``: the command a user runs, end to end (imports,
  analysis, JSON findings; no HTML);
- ``tlparse``: tlparse's report of the same file (``-o DIR --overwrite
  --no-browser``), if a tlparse binary is found (``--tlparse``, else on PATH or
  beside this Python).

The generated trace is deleted afterwards unless ``--keep DIR`` names a place for it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = "fixtures.many_breaks:target"

# Runs a command as its only child and reports its wall time and peak RSS.
_MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
wall = time.perf_counter() - t
print(json.dumps({"rc": done.returncode, "wall": wall,
                  "rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "out": done.stdout[-4000:]}))
"""
_INGEST = """
import json, sys, time
from graphbreak_doctor.ingest import ingest
t = time.perf_counter()
findings = ingest([sys.argv[1]])
print("RESULT " + json.dumps({"seconds": time.perf_counter() - t, "breaks": len(findings.breaks),
                              "hits": sum(b.count for b in findings.breaks),
                              "unparsed": len(findings.unparsed_events)}))
"""


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("TORCH_TRACE", "TORCH_LOGS")}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return out


def record(folder: Path) -> Path:
    e = env()
    e["TORCH_TRACE"] = str(folder)
    subprocess.run([sys.executable, "-m", "fixtures.plain_compile", TARGET, "--mode", "both"],
                   cwd=ROOT, env=e, check=True, capture_output=True)
    (trace,) = folder.glob("dedicated_log_torch_trace_*.log")
    return trace


def grow(source: Path, dest: Path, size_mb: int) -> int:
    data = source.read_bytes()
    target = size_mb * 1_000_000
    with open(dest, "wb") as f:
        written = 0
        while written < target:
            f.write(data)
            written += len(data)
    return written


def measure(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _MEASURE, *argv], cwd=ROOT, env=env(),
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def find_tlparse(given: str | None) -> str | None:
    if given:
        return given
    beside = Path(sys.executable).with_name("tlparse")
    return shutil.which("tlparse") or (str(beside) if beside.exists() else None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=int, default=200)
    p.add_argument("--tlparse", metavar="PATH", help="the tlparse binary (pip install tlparse==0.4.3)")
    p.add_argument("--keep", metavar="DIR", help="keep the generated trace in this folder")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ingest-speed-") as tmp_name:
        tmp = Path(tmp_name)
        recorded = record(tmp / "recorded")
        big_dir = Path(args.keep) if args.keep else tmp / "big"
        big_dir.mkdir(parents=True, exist_ok=True)
        big = big_dir / "dedicated_log_torch_trace_generated.log"
        size = grow(recorded, big, args.size_mb)
        mb = size / 1e6
        print(f"trace: {mb:.0f} MB ({recorded.stat().st_size / 1e3:.0f} kB recorded from {TARGET}, repeated)")
        rows = []
        inner = measure([sys.executable, "-c", _INGEST, str(big)])
        result = json.loads(next(line for line in inner["out"].splitlines() if line.startswith("RESULT "))[7:])
        rows.append(("ingest() (read + analyse)", result["seconds"], inner["rss_mb"],
                     f"{result['breaks']} breaks, {result['hits']} hits, {result['unparsed']} unparsed"))
        cli = measure([sys.executable, "-m", "graphbreak_doctor", "ingest", str(big), "--no-html",
                       "--json", str(tmp / "findings.json")])
        rows.append(("graphbreak-doctor ingest (CLI)", cli["wall"], cli["rss_mb"], f"exit {cli['rc']}"))
        tlparse = find_tlparse(args.tlparse)
        if tlparse:
            version = subprocess.run([tlparse, "--version"], capture_output=True, text=True).stdout.strip()
            t = measure([tlparse, str(big), "-o", str(tmp / "tl_out"), "--overwrite", "--no-browser"])
            rows.append((version or "tlparse", t["wall"], t["rss_mb"], f"exit {t['rc']}"))
        else:
            print("tlparse not found (pip install tlparse==0.4.3, or --tlparse PATH): its row is left out")
        print(f"{'tool':34} {'seconds':>8} {'MB/s':>8} {'peak RSS MB':>12}  notes")
        for name, seconds, rss, note in rows:
            print(f"{name:34} {seconds:8.2f} {mb / seconds:8.1f} {rss:12.0f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

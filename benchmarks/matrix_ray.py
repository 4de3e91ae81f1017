"""What Ray adds to a matrix: the same 4-cell matrix (the reference dense
layer, FlashInfer 0.6.3 and the installed one x sm120, sm100, fullgraph),
run locally with --jobs 2 and on a local Ray cluster of two nodes with one
CPU each (the same two jobs at once), interleaved, a few rounds. Prints the
wall time of each run, and Ray's overhead per cell against the local run
(target: at most 15% of it). Needs root (the cluster runs in a network
namespace with only loopback: tests/ray_cluster.py) and Ray (requirements/ray.txt).

    .venv/bin/python benchmarks/matrix_ray.py [--rounds 2] [--envs DIR]

The environments are the doctor's own (--envs; built on the first run, then
reused): the numbers are about running the cells, not building them.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ray_cluster import loopback_cluster, popen_in_ns  # noqa: E402

TARGET = 0.15
CELLS = 4


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def run(ns: str, args: list[str], out: Path) -> tuple[float, dict]:
    start = time.monotonic()
    proc = popen_in_ns(ns, sys.executable, "-m", "graphbreak_doctor", "matrix", *args, "--no-html",
                       "--json", str(out), cwd=out.parent)
    _stdout, stderr = proc.communicate()
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"matrix failed ({proc.returncode}): {stderr[-2000:]}")
    return wall, json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--envs", help="environments folder (default: the doctor's own)")
    args = parser.parse_args()
    fi = importlib.metadata.version("flashinfer-python")
    common = ["--layer", "dense", "--impl", "reference", "--flashinfer", f"0.6.3,{fi}", "--device", "sm120,sm100",
              "--mode", "fullgraph", *(["--envs", args.envs] if args.envs else [])]
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp, loopback_cluster(nodes=2, cpus=1) as (ns, address):
        out = Path(tmp) / "m.json"
        run(ns, [*common, "--jobs", "2"], out)  # environments built or found first, not timed
        print(f"4-cell matrix (reference dense layer, flashinfer 0.6.3,{fi} x sm120,sm100, fullgraph); "
              f"local --jobs 2 against Ray with 2 nodes x 1 CPU at {address}")
        print(f"{'round':>5}  {'executor':<8}  {'wall s':>7}  {'traces s':>8}  load before -> after")
        for n in range(1, args.rounds + 1):
            for name, extra in (("local", ["--jobs", "2"]), ("ray", ["--executor", "ray", "--address", address])):
                before = load()
                wall, data = run(ns, [*common, *extra], out)
                walls[name].append(wall)
                print(f"{n:>5}  {name:<8}  {wall:7.1f}  {data['trace_seconds']:8.1f}  {before} -> {load()}")
    local, ray = statistics.median(walls["local"]), statistics.median(walls["ray"])
    per_cell = (ray - local) / CELLS
    share = per_cell / (local / CELLS)
    print(f"median wall: local {local:.1f} s, ray {ray:.1f} s; Ray's overhead per cell {per_cell:+.2f} s = "
          f"{share:+.1%} of a local cell ({local / CELLS:.1f} s) (target at most {TARGET:.0%}: "
          f"{'met' if share <= TARGET else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

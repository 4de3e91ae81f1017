"""What the worker processes cost: `trace --layer dense` (both modes) run with
workers (the default) and with --in-process, alternately, several times.

Target: workers add at most 15% to the median wall time. Workers trace the
two modes of a target in parallel (--jobs defaults to the CPU count), each in a
fresh interpreter; --in-process traces them one after the other here.

    .venv/bin/python benchmarks/isolation.py [--runs 3] [--layer dense]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers import ROOT, measure  # noqa: E402

TARGET = 0.15


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=".venv", help="virtual environment to run in (default .venv)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--layer", default="dense")
    args = parser.parse_args()
    python = str(ROOT / args.env / "bin" / "python")
    if not os.path.exists(python):
        python = sys.executable
    base = ["trace", "--layer", args.layer, "--no-html"]
    ways = {"workers": base, "in-process": [*base, "--in-process"]}
    walls: dict[str, list[float]] = {w: [] for w in ways}
    rss: dict[str, float] = {w: 0.0 for w in ways}
    for _ in range(args.runs):
        for way, argv in ways.items():
            wall, peak, rc = measure(python, argv)
            if rc != 0:
                print(f"{way}: exit {rc}", file=sys.stderr)
                return 1
            walls[way].append(wall)
            rss[way] = max(rss[way], peak)
    print(f"graphbreak-doctor trace --layer {args.layer} --no-html, {args.runs} runs each, {os.cpu_count()} CPUs")
    print(f"{'how':<12}{'median s':>10}{'min s':>8}{'max s':>8}{'peak RSS MiB':>14}")
    for way in ways:
        w = walls[way]
        print(f"{way:<12}{statistics.median(w):>10.1f}{min(w):>8.1f}{max(w):>8.1f}{rss[way]:>14.0f}")
    overhead = statistics.median(walls["workers"]) / statistics.median(walls["in-process"]) - 1
    print(f"workers vs in-process: {overhead:+.0%} (target: at most +{TARGET:.0%})")
    return 0 if overhead <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())

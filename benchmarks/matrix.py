"""What the matrix costs: environment set-up on a first and a second run
(target: the second under 10% of the first), and the traces of a 4-cell
matrix with --jobs 1 and --jobs 2. Prints the load averages with each
number: on a shared machine they say how far to trust it.

    .venv/bin/python benchmarks/matrix.py [--envs DIR] [--sglang 0.5.9,0.5.23 --find-links DIR ...]
    .venv/bin/python benchmarks/matrix.py --vllm 0.33.0,0.34.0 --flashinfer 0.7.4 --parts setup

With --vllm the set-up part runs vLLM cells: the compile and CUDA-graph maps
of Qwen3-MoE's default launch on sm90, one per release (peak RSS: the
largest process so far, from the kernel).

--envs defaults to a new temporary folder (removed afterwards), so the first
run builds every environment (from uv's cache where it has the packages).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.10


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def matrix(argv: list[str], out: Path) -> tuple[dict, float]:
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "graphbreak_doctor", "matrix", *argv, "--no-html",
                           "--json", str(out)], env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"matrix failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(out.read_text()), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", help="environments folder (default: a new temporary one)")
    parser.add_argument("--sglang", help="SGLang releases for the set-up part (default: none, reference layer)")
    parser.add_argument("--vllm", help="vLLM releases for the set-up part (the model's maps instead of a layer)")
    parser.add_argument("--flashinfer", default="0.6.3,0.7.4")
    parser.add_argument("--find-links", action="append", default=[])
    parser.add_argument("--parts", default="setup,jobs", help="which parts to run (default setup,jobs)")
    args = parser.parse_args()
    temp = None if args.envs else tempfile.mkdtemp(prefix="matrix-bench-envs-")
    envs = args.envs or temp
    links = [a for link in args.find_links for a in ("--find-links", link)]
    axes = (["--sglang", args.sglang] if args.sglang else
            ["--vllm", args.vllm, "--model-path", "qwen3-30b-a3b", "--device", "sm90"] if args.vllm else
            ["--impl", "reference"])
    common = ["--flashinfer", args.flashinfer, "--envs", envs, *links]
    what = ["--model"] if args.vllm else ["--layer", "dense", "--mode", "fullgraph"]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "m.json"
            parts = args.parts.split(",")
            axis = ("sglang " + args.sglang if args.sglang else "vllm " + args.vllm if args.vllm else "reference")
            print(f"set-up ({axis} x flashinfer {args.flashinfer}; "
                  f"{'each cell the compile and CUDA-graph maps' if args.vllm else 'cells traced in fullgraph mode'})")
            setup = []
            for run in ("first", "second") if "setup" in parts else ():
                before = load()
                data, wall = matrix([*what, *common, *axes], out)
                setup.append(data["setup_seconds"])
                peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
                print(f"  {run} run: set-up {data['setup_seconds']:.3f} s ({data['envs_built']} built, "
                      f"{data['envs_reused']} reused), whole run {wall:.1f} s, peak RSS so far {peak:.0f} MiB; "
                      f"{before} -> {load()}")
            if setup:
                ratio = setup[1] / setup[0] if setup[0] else 0.0
                print(f"  second / first set-up: {ratio:.1%} (target < {TARGET:.0%}: "
                      f"{'met' if ratio < TARGET else 'NOT met'})")
            if "jobs" in parts:
                print("traces: 4 cells (reference dense layer, flashinfer x sm120,sm100, fullgraph), "
                      "environments reused")
            four = [*common, "--layer", "dense", "--impl", "reference", "--device", "sm120,sm100",
                    "--mode", "fullgraph"]
            for jobs in ("1", "2") if "jobs" in parts else ():
                before = load()
                data, wall = matrix([*four, "--jobs", jobs], out)
                print(f"  --jobs {jobs}: traces {data['trace_seconds']:.1f} s, whole run {wall:.1f} s; "
                      f"{before} -> {load()}")
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Wall time and peak RSS of `graphbreak-doctor trace --layer dense|moe|all` at real shapes.

Each case is one CLI run in its own process (as a user runs it), so the peak
RSS is that run's own. Target: under 1.5 GB peak RSS per run -- real weights
for one MoE layer would be about 4.8 GB; as fake tensors they own nothing.

    .venv/bin/python benchmarks/layers.py                      # sm120, both modes
    .venv/bin/python benchmarks/layers.py --device sm100 --env .venv-fi063
    .venv-sglang/bin/python benchmarks/layers.py --env .venv-sglang --impl sglang --layers dense,moe
    .venv-sglang/bin/python benchmarks/layers.py --env .venv-sglang --impl sglang --layers moe --mode piecewise

Target for SGLang's own layers (--impl sglang): at most 30 s per run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 1536
LIMIT_S = 30  # --impl sglang


def measure(python: str, argv: list[str]) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS MiB, exit code, CPU seconds of the run and its
    workers) of one CLI run in a child process."""
    return measure_command(python, [python, "-m", "graphbreak_doctor", *argv])


def measure_command(python: str, command: list[str]) -> tuple[float, float, int, float]:
    """measure() for any command, timed from a child process of ``python``."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
        "wall = time.perf_counter() - t\n"
        "use = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(wall, use.ru_maxrss / 1024, rc, use.ru_utime + use.ru_stime)\n"
    )
    out = subprocess.run([python, "-c", code, *command],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2]), float(out[3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=".venv", help="virtual environment to run in (default .venv)")
    parser.add_argument("--device", default="sm120")
    parser.add_argument("--mode", default="both")
    parser.add_argument("--layers", default="dense,moe,all")
    parser.add_argument("--impl", choices=("reference", "sglang"), default="reference",
                        help="whose layer code (sglang needs the SGLang environment)")
    args = parser.parse_args()
    python = str(ROOT / args.env / "bin" / "python")
    if not os.path.exists(python):
        python = sys.executable
    sglang = args.impl == "sglang"
    print(f"graphbreak-doctor trace --layer L --impl {args.impl} --device {args.device} --mode {args.mode} "
          f"--no-html  ({args.env}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    limits = f"< {LIMIT_MIB} MiB" + (f", <= {LIMIT_S} s" if sglang else "")
    print(f"{'layer':<8}{'wall s':>9}{'CPU s':>8}{'peak RSS MiB':>15}{'exit':>6}  {limits:>20}")
    failed = False
    for layer in args.layers.split(","):
        wall, rss, rc, cpu = measure(python, ["trace", "--layer", layer, "--impl", args.impl, "--device",
                                              args.device, "--mode", args.mode, "--no-html"])
        within = rss < LIMIT_MIB and (not sglang or wall <= LIMIT_S)
        failed |= not within
        print(f"{layer:<8}{wall:>9.1f}{cpu:>8.1f}{rss:>15.0f}{rc:>6}  {'yes' if within else 'NO':>20}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

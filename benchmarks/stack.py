"""Wall time and peak RSS of `trace --model` and `trace --layer L --whole-layer`
(SGLang's own GLM-5 model forward and whole decoder layers, with a ForwardBatch).

Each case is one CLI run in its own process (as a user runs it; see
layers.py, whose measurement this reuses). Target for `--model` (the model cut
to one layer of each kind): at most 90 s and 3 GB peak RSS per run.

    .venv-sglang/bin/python benchmarks/stack.py                     # sm100, default mode
    .venv-sglang/bin/python benchmarks/stack.py --mode fullgraph --forward decode
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers import measure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 3072
LIMIT_S = 90
CASES = {
    "model": ["--model"],
    "dense layer": ["--layer", "dense", "--whole-layer"],
    "moe layer": ["--layer", "moe", "--whole-layer"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=".venv-sglang", help="virtual environment to run in (default .venv-sglang)")
    parser.add_argument("--device", default="sm100")
    parser.add_argument("--mode", default="both")
    parser.add_argument("--forward", default="extend", choices=("extend", "decode"))
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    args = parser.parse_args()
    python = str(ROOT / args.env / "bin" / "python")
    if not os.path.exists(python):
        python = sys.executable
    print(f"graphbreak-doctor trace ... --forward {args.forward} --device {args.device} --mode {args.mode} --no-html "
          f"({args.env}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"{'case':<13}{'wall s':>9}{'CPU s':>8}{'peak RSS MiB':>15}{'exit':>6}  "
          f"{f'<= {LIMIT_S} s, <= {LIMIT_MIB} MiB':>24}")
    failed = False
    for case in args.cases.split(","):
        wall, rss, rc, cpu = measure(python, ["trace", *CASES[case], "--forward", args.forward, "--device",
                                              args.device, "--mode", args.mode, "--no-html"])
        within = wall <= LIMIT_S and rss <= LIMIT_MIB and rc == 0
        failed |= case == "model" and not within
        print(f"{case:<13}{wall:>9.1f}{cpu:>8.1f}{rss:>15.0f}{rc:>6}  {'yes' if within else 'NO':>24}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

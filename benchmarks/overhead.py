"""What the doctor adds over Dynamo itself: `trace --mode both` against a
bare `torch._dynamo.explain` plus `torch.compile(fullgraph=True,
backend="eager")` of the same target, in the same environment.

Target: on each target the doctor takes at most 1.15x bare Dynamo's wall time
and 1.5x its CPU time (the doctor runs with --no-cache: every run traces).

Both sides are a fresh process each, measured end to end, alternately
(doctor, bare, doctor, bare, ...), and the medians compared. The bare side
builds the target exactly as the doctor does: the same provider, inside the
same emulated device, so that its fake tensors and stand-ins are the same.
Then it calls Dynamo directly: no break capture, no classification, no
worker processes, no outputs. CPU seconds (the process and its children) are
shown beside wall time: the doctor's two modes run in two workers at once
(forked from one process that imported torch once: jobs/shared.py), the
bare side runs them one after the other in one process.

    .venv/bin/python benchmarks/overhead.py [--runs 3] [--targets fixture,dense]
    .venv-sglang/bin/python benchmarks/overhead.py --targets sglang-dense
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers import measure, measure_command  # noqa: E402

LIMIT = 1.15  # wall time, doctor / bare
CPU_LIMIT = 1.5  # CPU time, doctor / bare

# name -> the trace command's target arguments.
TARGETS = {
    "fixture": ["--target", "fixtures.breaks.subprocess_call:target", "--device", "cpu"],
    "dense": ["--layer", "dense", "--impl", "reference"],
    "sglang-dense": ["--layer", "dense", "--impl", "sglang"],
}


def bare(target_args: list[str]) -> int:
    """The bare side, in this process: build the target as the doctor does,
    then explain and a fullgraph compile, straight through Dynamo."""
    import torch

    from graphbreak_doctor.cli import build_parser
    from graphbreak_doctor.cli.targets import selections
    from graphbreak_doctor.diagnose import device_context, selection_builder
    from graphbreak_doctor.patching import UndoLog

    args = build_parser().parse_args(["trace", *target_args])
    (selection,) = selections(args)
    with UndoLog() as state:
        state.keep_torch_state()
        with device_context(args.device), UndoLog() as log:
            target = selection_builder(selection, args.device)(log)
            if target.prepare is not None:
                target.prepare("explain", log)
            torch._dynamo.explain(target.fn)(*target.args, **target.kwargs)
            torch._dynamo.reset()
            try:
                torch.compile(target.fn, fullgraph=True, backend="eager")(*target.args, **target.kwargs)
            except torch._dynamo.exc.Unsupported:
                pass  # the target's first break stops fullgraph: the outcome being measured
            torch._dynamo.reset()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", default="fixture,dense", help=f"comma-separated, of {', '.join(TARGETS)}")
    parser.add_argument("--bare", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare is not None:
        return bare(args.bare)
    chosen = args.targets.split(",")
    unknown = [t for t in chosen if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s): {', '.join(unknown)}")
    python = sys.executable
    print(f"the doctor's `trace --mode both` vs bare Dynamo (explain + fullgraph compile, backend eager); "
          f"{args.runs} runs each, alternately; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{Path(python).parent.parent.name}")
    print(f"{'target':<14}{'doctor s':>10}{'bare s':>9}{'ratio':>8}{'doctor CPU s':>14}{'bare CPU s':>12}"
          f"{'CPU ratio':>11}")
    worst = worst_cpu = 0.0
    for name in chosen:
        doctor_argv = ["trace", *TARGETS[name], "--mode", "both", "--no-html", "--no-cache"]
        walls: dict[str, list[float]] = {"doctor": [], "bare": []}
        cpus: dict[str, list[float]] = {"doctor": [], "bare": []}
        for _ in range(args.runs):
            for side in ("doctor", "bare"):
                if side == "doctor":
                    wall, _rss, rc, cpu = measure(python, doctor_argv)
                else:
                    wall, _rss, rc, cpu = measure_command(
                        python, [python, str(Path(__file__).resolve()), "--bare", *TARGETS[name]])
                if rc not in (0, 1):  # 1: the doctor found breaks
                    print(f"{name} ({side}): exit {rc}", file=sys.stderr)
                    return 2
                walls[side].append(wall)
                cpus[side].append(cpu)
        doctor, plain = statistics.median(walls["doctor"]), statistics.median(walls["bare"])
        doctor_cpu, plain_cpu = statistics.median(cpus["doctor"]), statistics.median(cpus["bare"])
        ratio = doctor / plain
        worst = max(worst, ratio)
        worst_cpu = max(worst_cpu, doctor_cpu / plain_cpu)
        print(f"{name:<14}{doctor:>10.1f}{plain:>9.1f}{ratio:>8.2f}{doctor_cpu:>14.1f}{plain_cpu:>12.1f}"
              f"{doctor_cpu / plain_cpu:>11.2f}")
    print(f"worst wall-time ratio: {worst:.2f} (target: at most {LIMIT}); "
          f"worst CPU-time ratio: {worst_cpu:.2f} (target: at most {CPU_LIMIT})")
    return 0 if worst <= LIMIT and worst_cpu <= CPU_LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())

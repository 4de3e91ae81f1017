"""Peak RSS and wall time of tracing flashinfer.fp4_quantize on [8192, 6144] under sm120.

Each case runs in its own subprocess so that `ru_maxrss` is that case's peak.
The target for a trace is < 1 GB peak RSS: the input alone would be
96 MiB real, and its outputs another 30 MiB; as fake tensors they own nothing.

    .venv/bin/python benchmarks/emulation_rss.py            # every env found
    .venv/bin/python benchmarks/emulation_rss.py --envs .venv
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ENVS = (".venv", ".venv-fi063")
MODES = ("import-only", "explain", "fullgraph")
LIMIT_MIB = 1024


def run_case(mode: str) -> dict:
    """In the child: import, trace once, report peak RSS (KiB on Linux)."""
    started = time.perf_counter()
    import torch

    import flashinfer
    from fixtures.flashinfer_targets import fp4_quantize_large
    from graphbreak_doctor.emulation import EmulatedDevice

    imported = time.perf_counter()
    outcome = "-"
    with EmulatedDevice("sm120") as dev:
        fn, args = fp4_quantize_large()
        if mode == "explain":
            torch.compile(fn, backend="eager")(*args)
            outcome = "ran with breaks"
        elif mode == "fullgraph":
            try:
                torch.compile(fn, fullgraph=True, backend="eager")(*args)
                outcome = "captured"
            except torch._dynamo.exc.Unsupported as e:
                outcome = "Unsupported: " + str(e).splitlines()[0][:40]
    finished = time.perf_counter()
    return {
        "flashinfer": flashinfer.__version__,
        "mode": mode,
        "import_s": round(imported - started, 2),
        "trace_s": round(finished - imported, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "jit_requests": len(dev.jit_requests),
        "outcome": outcome,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="*", default=list(DEFAULT_ENVS))
    parser.add_argument("--case", choices=MODES, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.case:
        print(json.dumps(run_case(options.case)))
        return 0

    rows = []
    for env in options.envs:
        python = ROOT / env / "bin" / "python"
        if not python.exists():
            print(f"skipping {env}: no {python}", file=sys.stderr)
            continue
        for mode in MODES:
            child = subprocess.run(
                [str(python), __file__, "--case", mode],
                cwd=ROOT,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            if child.returncode != 0:
                print(child.stderr[-2000:], file=sys.stderr)
                return child.returncode
            rows.append({"env": env, **json.loads(child.stdout.strip().splitlines()[-1])})

    header = ("env", "flashinfer", "mode", "import_s", "trace_s", "peak_rss_mib", "jit_requests", "outcome")
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in header]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(str(r[h]).ljust(w) for h, w in zip(header, widths)))
    worst = max((r["peak_rss_mib"] for r in rows if r["mode"] != "import-only"), default=0)
    print(f"\nworst traced peak RSS: {worst} MiB (target < {LIMIT_MIB} MiB): "
          f"{'OK' if worst < LIMIT_MIB else 'OVER'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

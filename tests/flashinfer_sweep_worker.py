"""Trace FlashInfer sweep entry points on one emulated device, in this process
(tests/test_flashinfer_sweep.py starts one per device).

    python tests/flashinfer_sweep_worker.py DEVICE OUT.json SPEC...

Each entry point is traced in explain mode in a fresh device context. What the
CLI would exit with is recorded per entry: a target that raises without
torch.compile (exit 2), a crash under Dynamo (exit 3), or findings.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(device: str, out: str, specs: list[str]) -> int:
    from graphbreak_doctor.diagnose import target_builder, trace_mode
    from graphbreak_doctor.model import CRASHED
    from graphbreak_doctor.targets import TargetError

    results = {}
    for spec in specs:
        started = time.process_time()
        try:
            findings = trace_mode(target_builder(spec), "explain", device=device)
        except TargetError as e:
            cause = type(e.__cause__).__name__ if e.__cause__ is not None else ""
            kind = "missing" if cause == "EntryPointMissing" else "target-error"
            results[spec] = {"outcome": kind, "message": str(e)}
            continue
        crashed = findings.outcome == CRASHED or findings.fullgraph.crashed
        outcome = "crash" if crashed else "findings"
        results[spec] = {"outcome": outcome, "message": findings.fullgraph.error or "",
                         "findings": findings.to_dict(), "cpu_s": round(time.process_time() - started, 2)}
    Path(out).write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))

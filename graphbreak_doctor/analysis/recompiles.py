"""What the recompiles of a run at the server's sizes mean
(graphbreak_doctor.capture.sizes), and the change that fits them.

Dynamo's guard-failure reasons say which guard a call failed:

- ``tensor 'x' rank mismatch. expected 2, actual 3``: the input's number of
  dimensions changed. No dynamic dimension covers a new rank: each rank is a
  graph of its own. Fix: flatten in an eager wrapper -- reshape the input to
  one fixed rank before the compiled call and back after it, so the compiled
  function always sees the same rank (``eager-flatten``). Rank 1 is the
  general form: it takes every rank, a scalar included, where a function
  works element by element; one that works along the last dimension (a norm,
  a projection) keeps that dimension and flattens the rest (rank 2).
- ``tensor 'x' size mismatch at index 0. expected 8, actual 16`` (a
  dimension Dynamo specialised on: ``dynamic=False``, or one it was told is
  static): fix: mark the dimension dynamic before the first call,
  ``torch._dynamo.mark_dynamic(x, 0)``, or compile with ``dynamic=True``
  (``mark-dynamic``).
- anything else (a Python number or a flag the function reads, a guard on a
  value): a graph per value. Fix: pad to a few bucket sizes (round the input
  up to the next of a handful of sizes, as servers pad batches to their
  CUDA-graph sizes), so only that many graphs are ever compiled
  (``pad-to-buckets``).
"""

from __future__ import annotations

import re

from graphbreak_doctor.model.sizes import SizedRun

_RANK = re.compile(r"rank mismatch")
_SIZE = re.compile(r"size mismatch at index (\d+)")

FIXES = {
    "eager-flatten": ("Flatten in an eager wrapper: reshape the input to rank 1 before the compiled call and back "
                      "after it (compiled(x.reshape(-1)).reshape(x.shape)); a function that works along the last "
                      "dimension keeps it (x.reshape(-1, x.shape[-1])). The compiled function then sees one rank, "
                      "and one dynamic dimension covers every size"),
    "mark-dynamic": ("Mark the dimension dynamic before the first call (torch._dynamo.mark_dynamic(x, {index})), "
                     "or compile with dynamic=True: one graph covers every size"),
    "pad-to-buckets": ("Pad to buckets: round the input up to the next of a few fixed sizes before the call, as "
                       "servers pad batches to their CUDA-graph sizes; at most that many graphs are compiled"),
}


def judge(run: SizedRun) -> SizedRun:
    """Fill the run's verdict (when a call hit the limit) and the fix that
    fits its reasons (when anything recompiled)."""
    reasons = [r for c in run.calls for r in c.reasons]
    if reasons:
        run.fix, run.fix_text = _fix(reasons)
    hit = next((c for c in run.calls if c.limit_hit), None)
    if hit is not None:
        last = hit.reasons[-1] if hit.reasons else (reasons[-1] if reasons else "not recorded")
        run.verdict = (f"recompile limit hit at size {hit.size}: Dynamo compiled the target "
                       f"{run.recompile_limit} times (torch._dynamo.config.recompile_limit = {run.recompile_limit}); "
                       "a server that compiles it with fullgraph=True fails there (FailOnRecompileLimitHit), "
                       "without fullgraph it runs that frame eagerly, uncompiled, from then on. "
                       f"Dynamo's last reason: {last}")
    return run


def _fix(reasons: list[str]) -> tuple[str, str]:
    if any(_RANK.search(r) for r in reasons):
        return "eager-flatten", FIXES["eager-flatten"]
    sized = next((m for r in reasons if (m := _SIZE.search(r))), None)
    if sized is not None:
        return "mark-dynamic", FIXES["mark-dynamic"].format(index=sized.group(1))
    return "pad-to-buckets", FIXES["pad-to-buckets"]

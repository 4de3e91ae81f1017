"""How much of a target's work its compiled graphs hold.

The fix ladder keeps a change only when it does not move work out of the
captured graphs: hiding code behind ``torch.compiler.disable`` or letting
Dynamo fall back to eager removes breaks by running more of the forward
outside any graph, and that is no fix. The measure is the number of
operators the dispatcher sees:

- ``eager_ops(target)``: the target's plain call, every operator counted;
- ``GraphOps``: wraps each graph a backend returns, and counts the operators
  dispatched while one of them runs, on a call made after compilation (the
  graphs are cached then, so no tracing happens under the count).

An operator registered by the target (a custom op made from a library
function) counts once wherever it runs: what it calls inside is its own
business, in eager and compiled runs alike, and a graph that calls it holds
it (a CUDA graph captures its kernels). Dynamo compiles nothing while a
user's dispatch mode is active, which is why the count inside graphs is
switched on only for the duration of each graph's call.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable

from torch.utils._python_dispatch import TorchDispatchMode


class _Count(TorchDispatchMode):
    """Counts every operator the dispatcher reaches, then runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def eager_ops(fn: Callable, args: tuple, kwargs: dict) -> int:
    """Operators one plain call of ``fn`` dispatches (its output is dropped)."""
    count = _Count()
    with contextlib.redirect_stdout(sys.stderr), count:
        fn(*args, **kwargs)
    return count.n


class GraphOps:
    """A backend's graphs, counted while they run and the count is armed."""

    def __init__(self) -> None:
        self.armed = False
        self.n = 0

    def wrap(self, forward: Callable) -> Callable:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if not self.armed:
                return forward(*args, **kwargs)
            count = _Count()
            # Graphs do not nest: a graph's call never reaches another one.
            self.armed = False
            try:
                with count:
                    return forward(*args, **kwargs)
            finally:
                self.armed = True
                self.n += count.n

        return counted

    @contextlib.contextmanager
    def counting(self):
        self.armed, self.n = True, 0
        try:
            yield
        finally:
            self.armed = False

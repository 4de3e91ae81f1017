"""The SGLang framework: how its server reads its launch arguments, sets up
its runtime, builds a model from a config folder through its own loader,
runs its phases and compiles (builder.py makes the target). The other
modules import torch; this one does not, so the command line can ask
whether SGLang is there."""

from __future__ import annotations

import importlib.util

# The batches of --whole-layer / --model (forward.py make_state), and the
# phases a server runs, in order: prefill, then decode.
PHASES = ("extend", "decode")


def available() -> bool:
    """Whether SGLang is installed (it is imported only inside the device)."""
    return importlib.util.find_spec("sglang") is not None

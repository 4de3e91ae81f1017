"""The vLLM framework: how ``vllm serve`` reads its launch arguments and
resolves them into a ``VllmConfig`` (launch.py), builds a model through its
own model registry and loader from a config folder (model.py), and which
forward it compiles, and how (builder.py makes the target). What vLLM
cannot do on an emulated GPU without help is in emulation.py and
vllm_libs.py. The other modules import torch; this one
does not, so the command line can ask whether vLLM is there."""

from __future__ import annotations

import importlib.util

# The phase the map runs: vLLM's profile run, one forward of the model at
# its largest batch (the runner's dummy run), before anything is captured.
PHASES = ("profile",)


def available() -> bool:
    """Whether vLLM is installed (it is imported only inside the device)."""
    return importlib.util.find_spec("vllm") is not None

"""The decode forward as ``--enable-torch-compile`` compiles it.

With ``--enable-torch-compile``, SGLang's decode CUDA-graph runner captures
each of its compile batch sizes (the capture sizes up to
``--torch-compile-max-bs``) inside its own ``patch_model`` context: the
fused ops switch to their torch forms and the model's forward is wrapped in
``torch.compile`` (not fullgraph, static shapes), once per size. Before
capturing it applies its own compile settings (``set_torch_compile_config``:
Inductor options and Dynamo's recompile limit).

Everything here is SGLang's own code, found by feature: the compile batch
sizes come from its ``get_batch_sizes_to_capture``, the settings from its
``set_torch_compile_config`` (Dynamo's and Inductor's configs are put back
afterwards), the wrapping from its ``patch_model``. The doctor runs the
smallest, a middle and the largest compile size, in that order, as the
server does; each is a torch.compile call the compile map records, and the
recompiles between sizes carry Dynamo's own guard-failure reasons.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.targets.frameworks.sglang import runtime
from graphbreak_doctor.text import one_line

# Where releases keep the three functions (first found wins).
PATCH_MODEL = ("sglang.srt.compilation.torch_compile_decoration:patch_model",
               "sglang.srt.model_executor.cuda_graph_runner:patch_model")
SETTINGS = ("sglang.srt.compilation.torch_compile_decoration:set_torch_compile_config",
            "sglang.srt.model_executor.cuda_graph_runner:set_torch_compile_config")
BATCH_SIZES = ("sglang.srt.model_executor.runner.base_cuda_graph_runner:get_batch_sizes_to_capture",
               "sglang.srt.model_executor.cuda_graph_runner:get_batch_sizes_to_capture")
TP_GROUP = ("sglang.srt.distributed.parallel_state:get_tp_group",)

# A server with room for every batch size it captures: the request pool the
# size list is clamped to, unless --max-running-requests says otherwise.
ROOMY_POOL = 1 << 16


@dataclass
class DecodeCompile:
    """What SGLang's decode runner compiles: its compile batch sizes, the ones
    traced, and Dynamo's recompile limit under SGLang's settings."""

    compile_bs: list[int] = field(default_factory=list)
    traced_bs: list[int] = field(default_factory=list)
    recompile_limit: int = 0
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for the map's decode phase."""
        if not self.compile_bs:
            return "; ".join(["no compile batch size: nothing compiled", *self.notes])
        sizes = ", ".join(str(b) for b in self.compile_bs)
        traced = ", ".join(str(b) for b in self.traced_bs)
        line = (f"compiled once per batch size, {len(self.compile_bs)} sizes ({sizes}); traced at {traced}; "
                f"Dynamo's recompile limit under SGLang's settings: {self.recompile_limit}")
        if len(self.compile_bs) > self.recompile_limit:
            line += " (the sizes reach it: the server falls back to eager past the limit)"
        return "; ".join([line, *self.notes])

    def to_dict(self) -> dict[str, Any]:
        return {"compile_bs": self.compile_bs, "traced_bs": self.traced_bs, "recompile_limit": self.recompile_limit,
                "notes": self.notes}


def enabled(rt: runtime.Runtime) -> bool:
    return bool(rt.launch.get("resolved", {}).get("enable_torch_compile"))


def compile_sizes(rt: runtime.Runtime) -> list[int]:
    """SGLang's own compile batch sizes for this launch."""
    _, sizes = runtime.require(*BATCH_SIZES)
    requests = getattr(rt.server_args, "max_running_requests", None) or ROOMY_POOL
    runner = SimpleNamespace(req_to_token_pool=SimpleNamespace(size=requests), server_args=rt.server_args)
    try:
        result = sizes(runner)
    except Exception as e:
        raise TargetError(f"SGLang {runtime.version()}'s decode batch sizes could not be read here: "
                          f"{type(e).__name__}: {one_line(str(e), 200)}") from e
    _capture, compile_bs = result if isinstance(result, tuple) else (result, result)
    return [int(b) for b in compile_bs]


@contextlib.contextmanager
def server_settings() -> Any:
    """SGLang's compile settings while the block runs; Dynamo's and Inductor's
    configs put back afterwards. Yields Dynamo's recompile limit under them."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    _, apply = runtime.require(*SETTINGS)
    with UndoLog() as log:
        log.keep_config(dynamo_config)
        log.keep_config(inductor_config)
        apply()
        yield int(getattr(dynamo_config, "recompile_limit", 0) or getattr(dynamo_config, "cache_size_limit", 0))


def compiled_forward(model: torch.nn.Module, batch_size: int) -> Any:
    """SGLang's ``patch_model`` for one compile size (a context manager that
    yields the compiled forward)."""
    _, patch_model = runtime.require(*PATCH_MODEL)
    _, tp_group = runtime.require(*TP_GROUP)
    return runtime.call(patch_model, model, enable_compile=True, num_tokens=batch_size, tp_group=tp_group())


__all__ = ["DecodeCompile", "compile_sizes", "compiled_forward", "enabled", "server_settings"]

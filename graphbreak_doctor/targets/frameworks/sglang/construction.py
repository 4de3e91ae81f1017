"""The modules traced, built as SGLang's server builds them, after its set-up
for the launch (set_up.py): one layer's MLP block behind its post-attention
norm (``load_block``), or the model with its decoder layers through SGLang's
loader (``load_model``). Both build inside the device, on fake CUDA tensors
whose checkpoint checks answer "consistent" (targets/frameworks/sglang/emulation.py)."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable

import torch

from graphbreak_doctor.targets.frameworks.sglang import emulation as sglang_emulation
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import TargetError, refused_by_check
from graphbreak_doctor.targets.frameworks.sglang import forward, runtime
from graphbreak_doctor.targets.frameworks.sglang.set_up import set_up_runtime
from graphbreak_doctor.text import one_line

# The keyword arguments SGLang's DeepseekV2DecoderLayer builds its MLP block
# with (a release gets those its constructor accepts).
_MLP_KWARGS = {"parallel_group": "tp", "reduce_results": False, "allow_fused_down": False}
_MOE_KWARGS = {"alt_stream": None, "is_nextn": False, "reduce_results": False}


class MlpBlock(torch.nn.Module):
    """What SGLang's decoder layer runs after attention: the post-attention
    RMSNorm, which adds the residual, then the MLP block."""

    def __init__(self, post_attention_layernorm: torch.nn.Module, mlp: torch.nn.Module) -> None:
        super().__init__()
        self.post_attention_layernorm = post_attention_layernorm
        self.mlp = mlp

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual


def load_block(kind: str, index: int, config_dir: str, log: UndoLog, *, piecewise: bool,
               launch_args: tuple[str, ...]) -> tuple[runtime.Runtime, MlpBlock]:
    """SGLang's set-up, then layer ``index``'s MLP block (``kind`` dense or
    moe) behind its norm, its quantized weights processed as SGLang's loader
    does after loading: (runtime, block)."""
    rt = set_up_runtime(kind == "moe", config_dir, log, piecewise=piecewise, launch_args=launch_args)
    block = _build_block(kind, index, rt)
    with sglang_emulation.consistent_fake_weights():
        _process_weights_after_loading(block)
    return rt, block


def _build_block(kind: str, index: int, rt: runtime.Runtime) -> MlpBlock:
    models = importlib.import_module("sglang.srt.models.deepseek_v2")
    _, rms_norm = runtime.require("sglang.srt.layers.layernorm:RMSNorm")
    _, default_dtype = runtime.require("sglang.srt.model_loader.utils:set_default_torch_dtype")
    config = rt.model_config.hf_config
    prefix = f"model.layers.{index}.mlp"
    with contextlib.ExitStack() as stack:
        stack.enter_context(default_dtype(rt.model_config.dtype))
        stack.enter_context(torch.device("cuda"))
        for building in rt.building:
            stack.enter_context(building())
        if kind == "dense":
            mlp = runtime.call(models.DeepseekV2MLP, hidden_size=config.hidden_size,
                               intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
                               quant_config=rt.quant_config, prefix=prefix,
                               swiglu_limit=getattr(config, "swiglu_limit", None), **_MLP_KWARGS)
        else:
            mlp = runtime.call(models.DeepseekV2MoE, config=config, layer_id=index, quant_config=rt.quant_config,
                               prefix=prefix, **_MOE_KWARGS)
        norm = rms_norm(config.hidden_size, eps=config.rms_norm_eps)
    return MlpBlock(norm, mlp)


def _process_weights_after_loading(block: torch.nn.Module) -> None:
    """What SGLang's loader runs on each quantized module after loading."""
    for module in block.modules():
        method = getattr(module, "quant_method", None)
        if method is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading(module)


def load_model(config_dir: str, log: UndoLog, *, layers_for: Callable[[runtime.Runtime], int], piecewise: bool,
               launch_args: tuple[str, ...], resolved: Callable[[runtime.Runtime], None] = lambda _rt: None,
               ) -> tuple[runtime.Runtime, torch.nn.Module, int, int]:
    """SGLang's set-up for the launch, then the model with ``layers_for(runtime)``
    decoder layers through SGLang's loader: (runtime, model, layers built,
    the model's layers). ``resolved`` is called with the
    runtime as soon as SGLang has resolved the launch, before the model is built."""
    try:
        rt = set_up_runtime(True, config_dir, log, piecewise=piecewise, launch_args=launch_args)
        resolved(rt)
        full = rt.model_config.hf_config.num_hidden_layers
        layers = layers_for(rt)
        with sglang_emulation.consistent_fake_weights():
            model = forward.build_model(rt, layers)
    except TargetError:
        raise
    except Exception as e:
        # One of SGLang's own checks while it builds the model for this
        # launch (a tensor-parallel size that does not divide the heads):
        # the server refuses the launch at start-up, in its words.
        refused = refused_by_check(e, "sglang", f"SGLang {runtime.version()}")
        if refused is not None:
            raise refused from e
        if isinstance(e, ValueError):  # SGLang's own refusal (a device or backend it does not support)
            raise TargetError(f"SGLang {runtime.version()} refuses to build the model here: "
                              f"{one_line(str(e), 300)}") from e
        raise
    return rt, model, layers, full


__all__ = ["MlpBlock", "load_block", "load_model"]

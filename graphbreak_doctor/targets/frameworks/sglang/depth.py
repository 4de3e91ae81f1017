"""How deep the reduced model is: the fewest leading decoder layers that hold
every kind of layer the full model has (``--model``), so that every code path
a server's forward runs is traced once and no path twice.

A layer's kind is SGLang's own answer. For the DeepSeek-V2 family (DeepSeek,
GLM-5, Kimi: models whose decoder layer is ``DeepseekV2DecoderLayer``) it is
the family's rule -- whether the layer's MLP is sparse (MoE) and whether its
DSA indexer reuses the previous layer's top-k. For any other model it is the
layer as SGLang builds it: the full-depth model is built once inside the
emulated device (fake weights, no memory), and two layers are of one kind
when their module trees hold the same classes at the same places (a dense
MLP and a sparse MoE block differ; layer numbers do not count).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from types import SimpleNamespace
from typing import Any, Hashable

import torch

from graphbreak_doctor.targets.frameworks.sglang import runtime


def _deepseek_layer_cls(rt: runtime.Runtime) -> Any:
    """``DeepseekV2DecoderLayer`` where the resolved model is of that family, else None."""
    models = importlib.import_module("sglang.srt.models.deepseek_v2")
    family = getattr(models, "DeepseekV2ForCausalLM", None)
    if family is not None and isinstance(rt.model_cls, type) and issubclass(rt.model_cls, family):
        return models.DeepseekV2DecoderLayer
    return None


def deepseek_kinds(layer_cls: Any, hf_config: Any, count: int) -> list[tuple]:
    """Decoder layer i's kind of ``count``: (sparse MLP, DSA top-k reused)."""
    skips = runtime.optional("sglang.srt.configs.model_config:dsa_layer_skips_topk")
    is_dsa = runtime.optional("sglang.srt.configs.model_config:is_deepseek_dsa")
    if is_dsa is not None and not is_dsa(hf_config):
        skips = None  # a model without the DSA indexer (DeepSeek-V3): SGLang's rule does not apply
    # SGLang's own rule: a static method of the config, or (older releases) a
    # method that reads self.config.
    static = isinstance(inspect.getattr_static(layer_cls, "_is_layer_sparse"), staticmethod)
    owner = hf_config if static else SimpleNamespace(config=hf_config)
    return [(bool(layer_cls._is_layer_sparse(owner, i, is_nextn=False)),
             bool(skips(hf_config, i)) if skips is not None else False) for i in range(count)]


def _structure(layer: torch.nn.Module) -> tuple:
    return tuple((name, type(module).__qualname__) for name, module in layer.named_modules())


def built_kinds(rt: runtime.Runtime) -> list[Hashable]:
    """Each decoder layer's module structure, from the model class SGLang
    resolved built at full depth (its constructor only: no weights loaded)."""
    _, load_config_cls = runtime.require("sglang.srt.configs.load_config:LoadConfig")
    _, initialize = runtime.require("sglang.srt.model_loader.loader:_initialize_model")
    _, default_dtype = runtime.require("sglang.srt.model_loader.utils:set_default_torch_dtype")
    with contextlib.ExitStack() as stack:
        stack.enter_context(default_dtype(rt.model_config.dtype))
        stack.enter_context(torch.device("cuda"))
        for building in rt.building:
            stack.enter_context(building())
        model = runtime.call(initialize, rt.model_config, load_config_cls(load_format="dummy"),
                             quant_config=rt.quant_config)
    layers = getattr(getattr(model, "model", model), "layers", None)
    if layers is None:
        return [_structure(model)]
    return [_structure(layer) for layer in layers]


def layer_kinds(rt: runtime.Runtime, count: int | None = None) -> list[Hashable]:
    """The kind of each of the first ``count`` decoder layers (all by default)."""
    hf = rt.model_config.hf_config
    count = hf.num_hidden_layers if count is None else count
    layer_cls = _deepseek_layer_cls(rt)
    if layer_cls is not None:
        return deepseek_kinds(layer_cls, hf, count)
    return built_kinds(rt)[:count]


def kinds_of(rt: runtime.Runtime, model: torch.nn.Module) -> list[Hashable]:
    """The kind of each decoder layer of a built (reduced) ``model``."""
    layers = list(getattr(getattr(model, "model", model), "layers", None) or [])
    layer_cls = _deepseek_layer_cls(rt)
    if layer_cls is not None:
        return deepseek_kinds(layer_cls, rt.model_config.hf_config, len(layers))
    return [_structure(layer) for layer in layers]


def is_moe(kind: Hashable) -> bool:
    """Whether a layer of this kind runs a MoE block (its sparse flag, or an
    experts module in its structure)."""
    if isinstance(kind, tuple) and kind and isinstance(kind[0], bool):
        return kind[0]
    return any(name.split(".")[-1] == "experts" for name, _cls in kind)


def reduced_layer_count(rt: runtime.Runtime) -> int:
    """The fewest leading layers that hold every kind the full model has."""
    kinds = layer_kinds(rt)
    wanted = set(kinds)
    for n in range(1, len(kinds) + 1):
        if set(kinds[:n]) == wanted:
            return n
    return len(kinds)


__all__ = ["is_moe", "kinds_of", "layer_kinds", "reduced_layer_count"]

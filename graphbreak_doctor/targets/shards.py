"""The traced rank's shard of a built model: each tensor a decoder layer
holds (parameters and buffers), with the shape and dtype the framework's
own loader gave it for this rank of the launch's world, one layer of each
kind (the layers a framework builds differ by their MLP: dense or MoE).
Framework-neutral: it reads the built ``torch.nn.Module`` only."""

from __future__ import annotations

from typing import Any, Iterable

import torch


def _tensor(value: torch.Tensor) -> dict[str, Any]:
    return {"shape": [int(n) for n in value.shape], "dtype": str(value.dtype).replace("torch.", ""),
            "bytes": int(value.numel()) * value.element_size()}


def layer_tensors(layer: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """Each parameter and buffer of ``layer`` by its dotted name: shape, dtype, bytes."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in (*layer.named_parameters(), *layer.named_buffers()):
        if isinstance(value, torch.Tensor) and name not in out:
            out[name] = _tensor(value)
    return out


def by_kind(layers: Iterable[torch.nn.Module]) -> dict[str, dict[str, Any]]:
    """The first layer of each kind among ``layers`` (layer_kind): its index,
    its MLP's class, its tensors and their bytes in all."""
    found: dict[str, dict[str, Any]] = {}
    for index, layer in enumerate(layers):
        mlp = getattr(layer, "mlp", None)
        kind = layer_kind(layer)
        if kind in found:
            continue
        tensors = layer_tensors(layer)
        found[kind] = {"layer": index, "mlp": type(mlp).__name__ if mlp is not None else "",
                       "bytes": sum(t["bytes"] for t in tensors.values()), "tensors": tensors}
        heads = attention_heads(layer)
        if heads is not None:
            found[kind]["attention_heads"] = heads
    return found


def layer_kind(layer: torch.nn.Module) -> str:
    """"moe" when the layer's MLP holds experts, else "dense"."""
    return "moe" if hasattr(getattr(layer, "mlp", None), "experts") else "dense"


def attention_heads(layer: torch.nn.Module) -> int | None:
    """The attention heads ``layer`` holds on this rank: its attention
    module's count of local heads (the name a framework gives it), or None."""
    attention = getattr(layer, "self_attn", None)
    for name in ("num_local_heads", "num_heads"):
        value = getattr(attention, name, None)
        if isinstance(value, int):
            return value
    return None


__all__ = ["attention_heads", "by_kind", "layer_kind", "layer_tensors"]

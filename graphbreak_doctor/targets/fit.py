"""Does the launch fit: the traced rank's weight bytes for the whole model
(from the shard of each kind of decoder layer the framework's loader built,
times how many layers of that kind the model has, plus what lies outside
the decoder layers: embedding, final norm, output head) against the emulated
GPU's memory, and what is left for the KV cache at the launch's static
memory fraction (``--mem-fraction-static``, ``--gpu-memory-utilization``):
fraction x memory - weights. A server whose weights do not fit, or leave no
KV cache, stops at start-up. Framework-neutral: it reads built modules and
the numbers the framework's launch resolved. docs/emulation.md, "Does it fit"."""

from __future__ import annotations

from typing import Any, Iterable

import torch

from graphbreak_doctor.emulation import world

GB = 1000 ** 3


def _parameter_bytes(parameters: Iterable[torch.nn.Parameter]) -> int:
    seen: set[int] = set()
    total = 0
    for p in parameters:
        if id(p) not in seen:  # a tied weight (embedding and head) counts once
            seen.add(id(p))
            total += int(p.numel()) * p.element_size()
    return total


def weights(model: torch.nn.Module, layers: list[torch.nn.Module], kinds: list[str]) -> dict[str, Any]:
    """This rank's weight bytes for the whole model: ``layers`` are the
    decoder layers the framework built (one or more of each kind), ``kinds``
    the kind of each of the model's decoder layers (its full depth)."""
    built_ids = {id(p) for layer in layers for p in layer.parameters()}
    outside = _parameter_bytes(p for p in model.parameters() if id(p) not in built_ids)
    per_kind: dict[str, int] = {}
    for layer, kind in zip(layers, kinds):
        per_kind.setdefault(kind, _parameter_bytes(layer.parameters()))
    counts = {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}
    missing = [kind for kind in counts if kind not in per_kind]
    if missing:
        raise ValueError(f"no built layer of kind {', '.join(missing)}")
    total = outside + sum(per_kind[kind] * n for kind, n in counts.items())
    return {"weights_bytes": total, "outside_layers_bytes": outside,
            "layer_bytes": per_kind, "layers": counts}


def verdict(found: dict[str, Any], memory_bytes: int, fraction: float | None, option: str,
            device: str) -> dict[str, Any]:
    """``found`` (weights()) against a GPU of ``memory_bytes``, at the launch's
    static fraction ``fraction`` (named by its ``option``; None: the launch
    resolved none): the record and its one line."""
    weight = found["weights_bytes"]
    out = {**found, "device_memory_bytes": memory_bytes, "fraction": fraction, "fraction_option": option}
    head = f"weights {weight / GB:.1f} GB per GPU of {device}'s {memory_bytes / GB:.1f} GB"
    if weight >= memory_bytes:
        out.update(fits=False, kv_cache_bytes=None)
        out["text"] = f"does not fit: {head}; the server stops while it loads them"
        return out
    if fraction is None:
        out.update(fits=True, kv_cache_bytes=None)
        out["text"] = f"fits: {head}"
        return out
    kv = fraction * memory_bytes - weight
    out.update(fits=kv > 0, kv_cache_bytes=int(kv))
    if kv <= 0:
        out["text"] = (f"does not fit: {head}; {option} {fraction:g} leaves no KV cache "
                       f"({fraction:g} x {memory_bytes / GB:.1f} GB < the weights): the server stops at start-up")
    else:
        out["text"] = f"fits: {head}; at {option} {fraction:g} the KV cache gets {kv / GB:.1f} GB"
    return out


def assess(model: torch.nn.Module, layers: list[torch.nn.Module], kinds: list[str], fraction: float | None,
           option: str) -> tuple[dict[str, Any] | None, str]:
    """weights() and verdict() on the current (emulated) GPU: the record (None
    where it cannot be worked out) and the findings' note, "memory (rank 0
    of 8): ..."."""
    here = world.joined() or world.World(1, 0)
    try:
        record = verdict(weights(model, layers, kinds), torch.cuda.get_device_properties(0).total_memory,
                         fraction, option, torch.cuda.get_device_name())
        said = record["text"]
    except ValueError as e:  # a kind of layer the reduced model does not hold: said, not guessed
        record, said = None, f"not worked out: {e}"
    return record, f"memory (rank {here.rank} of {here.size}): {said}"


__all__ = ["GB", "assess", "verdict", "weights"]

"""GLM-5-NVFP4 as the served-model provider (targets/serving.py) offers it:
its decoder layers by kind (``--layer dense|moe|all``: a layer's block, the
whole layer, or the model forward cut to one layer of each kind, as a
framework builds them), the project's re-creation of a layer calling
FlashInfer directly (``--impl reference``, sharded by ``--tp``), and the
record a framework builds GLM-5 from (the first layer of a kind and the
layers that run the same code). Imports no torch; the re-created layer's
builder is loaded when it is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from graphbreak_doctor.targets import Target
from graphbreak_doctor.targets.frameworks.framework import Served
from graphbreak_doctor.targets.models.glm5.config import check_tp, load_config
from graphbreak_doctor.targets.provider import Selection

ARCHITECTURE = "GlmMoeDsaForCausalLM"
NAME = f"GLM-5 ({ARCHITECTURE})"
REFERENCE_NOTE = ("implementation: graphbreak-doctor's re-creation of SGLang's layer, calling FlashInfer directly "
                  "(--impl reference; what code that calls FlashInfer's wrappers itself sees)")
ALL_NOTE = "--layer all traces one dense and one MoE layer; the other 76 decoder layers run the same code"


def first_layer(loaded: Any, kind: str) -> int:
    """The first decoder layer of ``kind`` (dense, moe), or a ValueError
    (exit 2) naming the config values that leave the model none."""
    indices = loaded.layer_indices(kind)
    if not indices:
        values = ", ".join(f"{k}={loaded.values.get(k)!r}" for k in
                           ("num_hidden_layers", "first_k_dense_replace", "moe_layer_freq", "n_routed_experts"))
        raise ValueError(f"{loaded.path}: the model has no {kind} layer ({values})")
    return indices[0]


def layer_selections(provider: str, layer: str, impl: str, *, framework: bool, config: str | None, tokens: int,
                     tp: int, cold: bool, scope: str, phase: str, launch: tuple[str, ...]) -> list[Selection]:
    """The selections of ``--layer`` (or the model) for ``impl`` (a
    framework's name, ``framework`` true; else the re-creation), whether or
    not this environment can build them (a matrix cell runs in another one).
    The config is read now, so a bad --config (or a --tp it cannot shard) is
    a usage error before anything is traced."""
    loaded = load_config(config)
    if scope == "block" and not framework:
        check_tp(loaded, tp)
    kinds = ["dense", "moe"] if layer == "all" else [layer]
    if scope != "block":
        return [_stack_selection(provider, kind, impl, loaded, tokens=tokens, tp=tp, cold=cold, scope=scope,
                                 phase=phase, all=layer == "all", launch=launch) for kind in kinds]
    common = {
        "config": loaded.path,
        "tokens": tokens,
        "tp": tp,
        "all": layer == "all",
        "impl": impl,
        "cold": cold,
        "launch": list(launch),
    }
    prefix = f"glm5-{impl}" if framework else "glm5"
    if framework:
        common["framework"] = impl
    return [Selection(provider, f"{prefix}-{kind}", {"kind": kind, **common},
                      spec=f"{prefix}:{kind}:{first_layer(loaded, kind)}") for kind in kinds]


def _stack_selection(provider: str, kind: str, impl: str, loaded: Any, *, tokens: int, tp: int, cold: bool,
                     scope: str, phase: str, all: bool, launch: tuple[str, ...]) -> Selection:
    options = {"kind": kind, "config": loaded.path, "tokens": tokens, "tp": tp,
               "all": all, "impl": impl, "framework": impl, "cold": cold, "scope": scope, "phase": phase,
               "launch": list(launch),
               # The model's forward: its compile map too (the regions each phase enters).
               "compile_map": kind == "model"}
    if kind == "model":
        return Selection(provider, f"glm5-{impl}-model-{phase}", options, spec=f"glm5-{impl}:model:{phase}")
    index = first_layer(loaded, kind)
    return Selection(provider, f"glm5-{impl}-{kind}-layer-{phase}", options,
                     spec=f"glm5-{impl}:{kind}:{index}:layer:{phase}")


def served(framework: str, kind: str, config: str, provider: str) -> Served:
    """GLM-5 as ``framework`` builds it: its config folder, name, and for
    one layer kind its first layer and the run of the same kind."""
    cfg = load_config(config)
    same = cfg.layer_indices("moe" if kind == "model" else kind)
    return Served(config_dir=str(Path(cfg.path).parent), name=NAME, spec=f"glm5-{framework}", provider=provider,
                  index=same[0], same=tuple(same), facts={"config": cfg.path, "quant_profile": cfg.quant.path},
                  shapes={"hidden_size": cfg.hidden_size})


def build_reference(options: Mapping[str, Any], device: str) -> Target:
    """The project's re-creation of the layer (builder.py)."""
    from graphbreak_doctor.targets.models.glm5 import builder

    target = builder.build_layer(options["kind"], config=options["config"], tokens=options["tokens"],
                                 tp=options["tp"], device=device)
    target.info.facts["impl"] = options["impl"]
    target.info.notes.insert(0, REFERENCE_NOTE)
    return target


def default_folder() -> str:
    """GLM-5-NVFP4's config folder (the served model when none is named)."""
    return str(Path(load_config(None).path).parent)


__all__ = ["ALL_NOTE", "ARCHITECTURE", "NAME", "REFERENCE_NOTE", "build_reference", "default_folder", "first_layer",
           "layer_selections", "served"]

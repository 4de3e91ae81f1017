"""The GLM-5 layer builder: ``build_layer("dense" | "moe", ...)`` must be
called inside the selected device (``graphbreak_doctor.emulation.EmulatedDevice``):
every weight is a ``torch.empty(..., device="cuda")`` and so a fake tensor
there, at the real shapes, with no memory behind it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from graphbreak_doctor.model import TargetInfo
from graphbreak_doctor.targets import Target
from graphbreak_doctor.targets.models.glm5 import ops
from graphbreak_doctor.targets.models.glm5.config import Glm5Config, check_tp, load_config
from graphbreak_doctor.targets.models.glm5.flashinfer_plan import FlashInferPlan, make_plan
from graphbreak_doctor.targets.models.glm5.layer import DecoderLayer, GatedMlp, Moe
from graphbreak_doctor.targets.models.glm5.weights import BF16_FORMAT, NVFP4_FORMAT


SPLIT_OPS = (ops.MLA_ATTENTION,)
MODEL = "GLM-5 (GlmMoeDsaForCausalLM)"


def _real_arch() -> str:
    """The preset name of the real GPU (``--device cuda``)."""
    from graphbreak_doctor.emulation.presets import preset_for_capability

    cap = tuple(torch.cuda.get_device_capability())
    preset = preset_for_capability(cap)
    return preset.name if preset else f"sm{cap[0]}{cap[1]}"


def _check_device(arch: str) -> None:
    from graphbreak_doctor.emulation.presets import emulated_presets

    capabilities = {p.name: p.capability for p in emulated_presets()}
    if arch not in capabilities:
        raise ValueError(f"unknown device {arch!r}; expected one of {sorted(capabilities)}")
    # Inside EmulatedDevice (or on a real GPU) the capability must agree with
    # the requested architecture; under a plain FakeTensorMode there is none.
    try:
        cap = tuple(torch.cuda.get_device_capability())
    except (RuntimeError, AssertionError, AttributeError):  # no CUDA device at all: nothing to compare
        return
    if cap != capabilities[arch]:
        raise ValueError(f"device={arch!r} but the current CUDA device reports capability {cap}")


def _check_tp(cfg: Glm5Config, tp: int) -> None:
    check_tp(cfg, tp)


def _tokens_inputs(cfg: Glm5Config, tokens: int, with_residual: bool):
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    positions = torch.empty(tokens, dtype=torch.int64, device="cuda")
    hidden = torch.empty(tokens, cfg.hidden_size, dtype=torch.bfloat16, device="cuda")
    residual = torch.empty(tokens, cfg.hidden_size, dtype=torch.bfloat16, device="cuda") if with_residual else None
    return positions, hidden, residual


def _layer_index(cfg: Glm5Config, kind: str, layer_index: int | None) -> int:
    indices = cfg.layer_indices(kind)
    if not indices:
        raise ValueError(f"{cfg.path} has no {kind} layers")
    if layer_index is None:
        return indices[0]
    if layer_index not in indices:
        raise ValueError(
            f"layer {layer_index} is not a {kind} layer (the {kind} layers are {indices[0]}..{indices[-1]})"
        )
    return layer_index


def _calls(layer: DecoderLayer, plan: FlashInferPlan) -> list[str]:
    q = ", ".join(f"{k}={v!r}" for k, v in plan.fp4_quantize_kwargs.items())
    q = f", {q}" if q else ""
    linear = [
        f"flashinfer.fp4_quantize(x, input_scale_inv{q}) [sf_vec_size=16, swizzled 128x4]",
        f"flashinfer.mm_fp4(x_fp4, W.T, x_sf, W_sf.T, alpha, bfloat16, backend={plan.mm_fp4_backend!r})",
    ]
    mlp = layer.mlp
    calls: list[str] = []
    if isinstance(mlp, GatedMlp) and mlp.gate_up.__class__.__name__ == "Nvfp4Linear":
        calls += [c + "  # gate_up_proj, down_proj" for c in linear]
    elif isinstance(mlp, Moe):
        m = mlp
        if plan.moe_backend == "cutlass_fused_moe":
            calls.append(
                f"(no FlashInfer routing) SGLang topk.py biased_grouped_topk_impl in torch: sigmoid(logits fp32) "
                f"+ e_score_correction_bias, grouped top-{m.top_k} (n_group={m.n_group}, topk_group={m.topk_group})"
                f"{', fused shared expert id ' + str(m.num_experts) if m.num_fused_shared else ''}; "
                f"fused_topk_deepseek rejects topk_group*n_group < topk"
            )
            calls.append(
                f"flashinfer.fused_moe.cutlass_fused_moe(output, input=bf16 x, experts={m.kernel_experts.num_experts}"
                f"{' (256 routed + fused shared)' if m.num_fused_shared else ''}, "
                f"fc1=w13.view(int64), fc2=w2.view(int64), quant_scales=[a1_gscale, w13_sf_swizzled.view(int32), "
                f"g1_alphas, a2_gscale, w2_sf_swizzled.view(int32), g2_alphas], tp_size={m.tp}, "
                f"activation_type=Swiglu)[0]"
            )
        else:
            calls.append(f"flashinfer.fp4_quantize(x, w13_input_scale_quant, 16, False, False{q}) [linear scale layout]")
            calls.append(
                f"flashinfer.fused_moe.trtllm_fp4_block_scale_moe(routing_logits fp32, routing_bias bf16, "
                f"num_experts={m.num_experts}, top_k={m.top_k}, n_group={m.n_group}, topk_group={m.topk_group}, "
                f"intermediate_size={m.inter_rank}, routed_scaling_factor={m.routed_scaling_factor}, "
                f"routing_method_type=DeepSeekV3, do_finalize=True)[0]"
            )
        if m.shared is not None and m.shared.gate_up.__class__.__name__ == "Nvfp4Linear":
            calls += [c + "  # shared expert" for c in linear]
    return calls


def _formats(layer: DecoderLayer) -> dict[str, str]:
    mlp = layer.mlp
    fmt = lambda lin: NVFP4_FORMAT if lin.__class__.__name__ == "Nvfp4Linear" else BF16_FORMAT  # noqa: E731
    formats = {"attention": BF16_FORMAT, "dsa_indexer": BF16_FORMAT, "norms": BF16_FORMAT}
    if isinstance(mlp, GatedMlp):
        formats["mlp"] = fmt(mlp.gate_up)
    elif isinstance(mlp, Moe):
        formats["router"] = "bf16 weight, fp32 e_score_correction_bias; logits routed in fp32"
        formats["routed_experts"] = NVFP4_FORMAT
        formats["shared_expert"] = (
            NVFP4_FORMAT + " (fused into the routed kernel as one more expert)"
            if mlp.num_fused_shared
            else fmt(mlp.shared.gate_up)
        )
    return formats


def build_attention(*, config: Glm5Config | str | Path | None = None, tokens: int = 128, tp: int = 1, layer_index: int = 0) -> Target:
    """The attention half of a decoder layer (norms + MLA + DSA indexer, no MLP):
    pure torch plus the registered attention ops, no FlashInfer. Runs under
    any FakeTensorMode."""
    cfg = config if isinstance(config, Glm5Config) else load_config(config)
    _check_tp(cfg, tp)
    layer = DecoderLayer(cfg, layer_index, "attention", tp)
    args = _tokens_inputs(cfg, tokens, with_residual=layer_index > 0)
    info = TargetInfo(
        spec=f"glm5:attention:{layer_index}",
        provider="glm5",
        title=f"{MODEL} attention of layer {layer_index}",
        function=layer.forward.__qualname__,
        shapes={"hidden_size": cfg.hidden_size, "attention_heads_per_rank": cfg.num_attention_heads // tp,
                "tokens": tokens, "tp": tp},
        facts={"model": MODEL, "layer_kind": "attention", "layer_index": layer_index, "config": cfg.path,
               "weight_formats": {"attention": BF16_FORMAT, "dsa_indexer": BF16_FORMAT}},
        split_ops=list(SPLIT_OPS + ((ops.ALL_REDUCE,) if tp > 1 else ())),
    )
    return Target(layer.forward, args, {}, info)


def build_layer(
    kind: str,
    *,
    config: Glm5Config | str | Path | None = None,
    tokens: int = 128,
    tp: int = 1,
    device: str = "sm120",
    layer_index: int | None = None,
    quant_profile: str | Path | None = None,
) -> Target:
    """One GLM-5 decoder layer at real shapes, for ``device`` ("sm120" RTX PRO
    6000, "sm100" B200). Call inside the emulated device.

    ``fn(positions, hidden_states, residual) -> (hidden_states, residual)`` as
    SGLang's ``DeepseekV2DecoderLayer.forward`` (without its batch/allocator
    arguments). ``residual`` is None for layer 0, as in SGLang.
    """
    if kind not in ("dense", "moe"):
        raise ValueError(f"layer kind must be 'dense' or 'moe', got {kind!r}")
    if isinstance(config, Glm5Config):
        cfg = config if quant_profile is None else load_config(config.path, quant_profile=quant_profile)
    else:
        cfg = load_config(config, quant_profile=quant_profile)
    if device == "cuda" and torch.cuda.is_available():
        device = _real_arch()
    _check_device(device)
    _check_tp(cfg, tp)
    index = _layer_index(cfg, kind, layer_index)

    # Imported here, inside the device: FlashInfer reads the target
    # architectures from the environment when it is first imported.
    import flashinfer
    from flashinfer import fused_moe

    plan = make_plan(device)
    layer = DecoderLayer(cfg, index, kind, tp, fi=flashinfer, fused_moe=fused_moe, plan=plan)
    args = _tokens_inputs(cfg, tokens, with_residual=index > 0)
    same = cfg.layer_indices(kind)
    mlp = layer.mlp
    shapes: dict[str, Any] = {"hidden_size": cfg.hidden_size}
    facts: dict[str, Any] = {
        "model": MODEL,
        "layer_kind": kind,
        "layer_index": index,
        "same_code_layers": f"{same[0]}-{same[-1]}" if len(same) > 1 else str(same[0]),
        "config": cfg.path,
        "quant_profile": cfg.quant.path,
        "intermediate_size": cfg.intermediate_size,
        "moe_intermediate_size": cfg.moe_intermediate_size,
        "attention_heads_per_rank": cfg.num_attention_heads // tp,
        "device": device,
        "weight_formats": _formats(layer),
        "flashinfer_version": plan.version,
        "flashinfer_calls": _calls(layer, plan),
        # Call-time notes (kwargs the installed FlashInfer lacks) are appended
        # to plan.notes during the first forward; the facts share the list.
        "flashinfer_notes": plan.notes,
    }
    if kind == "dense":
        shapes["intermediate_size_per_rank"] = cfg.intermediate_size // tp
    else:
        shapes.update(moe_intermediate_size_per_rank=cfg.moe_intermediate_size // tp,
                      n_routed_experts=cfg.n_routed_experts, experts_per_tok=cfg.num_experts_per_tok)
        facts.update(
            n_shared_experts=cfg.n_shared_experts,
            moe_backend=plan.moe_backend,
            shared_expert_fused=bool(mlp.num_fused_shared),
        )
    shapes.update(tokens=tokens, tp=tp)
    info = TargetInfo(
        spec=f"glm5:{kind}:{index}",
        provider="glm5",
        title=f"{MODEL} {kind} layer {index}",
        function=layer.forward.__qualname__,
        shapes=shapes,
        notes=[f"layers {facts['same_code_layers']} run the same code"] if len(same) > 1 else [],
        facts=facts,
        split_ops=list(SPLIT_OPS + ((ops.ALL_REDUCE,) if tp > 1 else ())),
        opaque_ops={op: ops.DESCRIPTIONS[op]
                    for op in (ops.MLA_ATTENTION, ops.DSA_INDEXER_TOPK) + ((ops.ALL_REDUCE,) if tp > 1 else ())},
    )
    target = Target(layer.forward, args, {}, info)
    return target

"""What the findings say about an SGLang target once its module is built:
what is traced and in which compile state, the shapes, the backends SGLang
chose, its split ops and the registered ops Dynamo does not trace into, and
what the emulation changed (``facts["emulation"]``)."""

from __future__ import annotations

from typing import Any

import torch

from graphbreak_doctor.targets.frameworks.sglang import emulation as sglang_emulation
from graphbreak_doctor.model import TargetInfo
from graphbreak_doctor.targets import fit, shards
from graphbreak_doctor.targets.frameworks.sglang import depth, distributed, runtime
from graphbreak_doctor.targets.frameworks.sglang.construction import MlpBlock

# What runs inside the registered ops SGLang's GLM-5 blocks call, where
# Dynamo does not trace (an op is listed only when the installed SGLang
# registers it).
OPAQUE_OPS = {
    "sglang::flashinfer_fp4_quantize": "FlashInfer's fp4_quantize (activation to NVFP4): its whole Python path, "
                                       "JIT included (the nvcc version probe, the module cache stats, the module load)",
    "sglang::fp4_gemm": "FlashInfer's mm_fp4 (the NVFP4 GEMM of SGLang's fp4 GEMM backend), with its JIT module load",
    "sglang::_run_activation_inplace": "SGLang's SiLU-and-mul activation kernel",
    "sgl_kernel::fused_add_rmsnorm": "sgl-kernel's fused residual add + RMSNorm kernel",
    "sgl_kernel::silu_and_mul": "sgl-kernel's SiLU-and-mul kernel",
    "sgl_kernel::scaled_fp4_quant": "sgl-kernel's activation to NVFP4 quantization kernel",
    "sglang::moe_forward_piecewise_cuda_graph_impl": "the routed experts: SGLang's FusedMoE dispatch and FlashInfer's "
                                                     "fused MoE kernel call, with its JIT and autotuner",
    "sglang::fused_moe_bypassed_piecewise_cuda_graph_impl": "the routed experts with routing inside the kernel: "
                                                            "FlashInfer's trtllm fused MoE call, with its JIT and autotuner",
    "sglang::apply_fp4_marlin_linear": "the Marlin FP4 GEMM (SGLang's JIT kernel)",
    "sglang::fused_marlin_moe": "the Marlin FP4 fused MoE (SGLang's JIT kernels)",
    "flashinfer::fp4_quantize": "FlashInfer's fp4_quantize, its own registered op",
}


def _backend_names() -> dict[str, str]:
    out = {"moe_runner_backend": str(runtime.moe_backend().value)}
    fp4 = runtime.optional("sglang.srt.layers.quantization.fp4_utils:get_fp4_gemm_runner_backend")
    if fp4 is not None:
        out["fp4_gemm_backend"] = str(fp4().value)
    return out


def _registered(qualname: str) -> bool:
    namespace, _, name = qualname.partition("::")
    return hasattr(getattr(torch.ops, namespace), name)


def fill_target_info(info: TargetInfo, module: torch.nn.Module, rt: runtime.Runtime, *, mode: str, tokens: int,
                     cold: bool, launched: list[str], mlp: torch.nn.Module | None = None) -> None:
    """``module``: what is traced; ``mlp``: its MLP block, if it is one layer's."""
    config = rt.model_config.hf_config
    info.function = module.forward.__qualname__
    layout = rt.launch.get("layout") or {}
    info.shapes.update(tokens=tokens, tp=int(layout.get("tp", 1)))
    kind = info.facts["layer_kind"]
    info.shapes.setdefault("hidden_size", config.hidden_size)
    if kind in ("dense", "model") and getattr(config, "intermediate_size", None):
        info.shapes["intermediate_size"] = config.intermediate_size
    # Each family names its MoE sizes its own way (transformers' names).
    experts = next((getattr(config, k, None) for k in ("n_routed_experts", "num_experts", "num_local_experts")
                    if getattr(config, k, None)), None)
    if kind in ("moe", "model") and experts:
        sizes = {"moe_intermediate_size": getattr(config, "moe_intermediate_size", None), "n_routed_experts": experts,
                 "experts_per_tok": getattr(config, "num_experts_per_tok", None)}
        info.shapes.update({k: v for k, v in sizes.items() if isinstance(v, int)})
        experts = getattr(mlp, "experts", None)
        total = getattr(experts, "num_experts", None)
        if total is not None:
            info.facts["experts_in_kernel"] = total
    state = "tc_piecewise (SGLang's piecewise CUDA-graph compile state)" if mode == "piecewise" else "plain"
    cls = type(mlp if isinstance(module, MlpBlock) else getattr(module, "layer", module))
    if isinstance(module, MlpBlock):
        info.notes.insert(0, f"implementation: SGLang {info.facts['sglang_version']}'s own {cls.__name__} "
                             f"({cls.__module__}) behind its RMSNorm, built through SGLang's set-up calls")
    info.notes.append(f"compile state: {state}; eager warm-up: "
                      + ("skipped (--cold)" if cold else "ran first, as SGLang warms up before it compiles"))
    info.notes.extend(rt.notes)
    talk = distributed.communicator_note(rt.launch.get("communicators") or {})
    if talk:
        info.notes.append(talk)
    if rt.model_cls is not None:
        info.notes.append(f"model: SGLang's registry serves {rt.architecture} with "
                          f"{rt.model_cls.__module__}.{rt.model_cls.__qualname__}; quantization: "
                          f"{getattr(rt.model_config, 'quantization', None) or _unquantized(rt)}, as SGLang read it")
    info.facts.update(
        sglang_module=f"{cls.__module__}.{cls.__qualname__}",
        quant_config=type(rt.quant_config).__name__ if rt.quant_config is not None else "none (unquantized)",
        # SGLang's own answers: the class its registry resolved for the
        # config's architectures, and the quantization method it chose.
        model_class=f"{rt.model_cls.__module__}.{rt.model_cls.__qualname__}" if rt.model_cls is not None else "",
        architecture=rt.architecture,
        quantization=str(getattr(rt.model_config, "quantization", None) or "none"),
        compile_state=state,
        launch=rt.launch,
        warm_up=not cold,
        **_backend_names(),
        emulation=_emulation_changes(),
        kernels_run_dry=launched,
    )
    layers = getattr(module, "layers", None)
    if isinstance(layers, torch.nn.ModuleList):
        # This rank's shard of one decoder layer of each kind, as SGLang's loader sized it.
        info.facts["shards"] = shards.by_kind(layers)
    info.split_ops = runtime.split_ops()
    info.opaque_ops = {op: text for op, text in OPAQUE_OPS.items() if _registered(op)}


def memory_fit(rt: runtime.Runtime, model: torch.nn.Module, full: int) -> tuple[dict[str, Any] | None, str]:
    """Does the launch fit on the device (fit.assess): this rank's weights for
    the whole model of ``full`` decoder layers, at the static memory fraction
    SGLang resolved."""
    kinds = ["moe" if depth.is_moe(kind) else "dense" for kind in depth.layer_kinds(rt, full)]
    return fit.assess(model, list(model.model.layers), kinds, runtime.mem_fraction_static(rt),
                      "--mem-fraction-static")


def _unquantized(rt: runtime.Runtime) -> str:
    return f"none ({str(getattr(rt.model_config, 'dtype', '?')).replace('torch.', '')} weights)"


def _emulation_changes() -> list[str]:
    changes = sglang_emulation.CHANGES
    out = [changes["isolate_caches"], changes["inductor_as_eager"], changes["consistent_fake_weights"]]
    out.append("Triton and CuTe DSL kernels: has_triton() answered True (launches captured as on the GPU); "
               "launches on fake tensors ran dry")
    return out


def model_note(info: TargetInfo, rt: runtime.Runtime, model: torch.nn.Module, layers: int, full: int) -> str:
    """The implementation note of a reduced model forward: which layers of how many."""
    kinds = depth.kinds_of(rt, model)
    moe = sum(1 for k in kinds if depth.is_moe(k))
    return (f"implementation: SGLang {info.facts['sglang_version']}'s own {type(model.model).__name__} forward "
            f"(what its piecewise runner compiles), {layers} of {full} decoder layers: the fewest "
            f"that hold each kind ({len(kinds) - moe} dense, {moe} MoE)"
            + ("; SGLang builds the next-N (MTP) layer only for speculative decoding, in its draft model"
               if getattr(rt.model_config.hf_config, "num_nextn_predict_layers", 0) else ""))

"""Which FlashInfer entry points a GLM-5 layer calls, with which arguments,
for the emulated architecture and the installed FlashInfer version.

The choices follow SGLang; version differences are found by inspecting the
installed signatures, never by comparing version strings:

- ``fp4_quantize``: 0.6.3 has no ``backend`` parameter; 0.7.4 has one and
  SGLang (``layers/quantization/fp4_utils.py``) passes ``"cute-dsl"`` on
  SM100 and ``"cuda"`` elsewhere.
- ``mm_fp4`` backend: SGLang ``fp4_utils.initialize_fp4_gemm_config`` with
  ``--fp4-gemm-backend auto`` picks ``flashinfer_cutedsl`` on SM100 and
  ``flashinfer_cutlass`` otherwise (``Fp4GemmRunnerBackend.get_flashinfer_backend``
  maps them to ``"cute-dsl"`` / ``"cutlass"``).
- CuTe-DSL needs the ``nvidia-cutlass-dsl`` package; where it is missing (or
  the installed ``mm_fp4`` does not list the backend) SGLang's choice cannot
  run at all, so the plan falls back to ``"cutlass"`` / ``"cuda"`` and says so
  in ``notes``.
- Keyword arguments SGLang passes that the installed function lacks (e.g.
  ``tile_tokens_dim`` to ``trtllm_fp4_block_scale_moe``) are dropped by
  ``call_kwargs`` and listed in ``notes``.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass, field
from typing import Any, Callable


def _params(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def _literal_values(param: inspect.Parameter) -> tuple[str, ...]:
    ann = param.annotation
    if isinstance(ann, str):
        # Postponed annotation: read the names between the quotes.
        return tuple(part.strip(" '\"") for part in ann.split("[", 1)[-1].rstrip("]").split(","))
    if typing.get_origin(ann) is typing.Literal:
        return tuple(typing.get_args(ann))
    return ()


def _cute_dsl_available() -> bool:
    # CuTe-DSL kernels are compiled by nvidia-cutlass-dsl and launched through
    # the CUDA driver (cuda.bindings cuDeviceGet...). An emulated device has no
    # driver: the compile runs, the launch cannot. Only a real GPU can run them.
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        from flashinfer.cute_dsl import is_cute_dsl_available
    except ImportError:
        return False
    try:
        return bool(is_cute_dsl_available())
    except Exception:  # a broken optional dependency counts as missing
        return False


@dataclass
class FlashInferPlan:
    arch: str
    version: str
    fp4_quantize_kwargs: dict[str, Any]
    mm_fp4_backend: str
    moe_backend: str  # "cutlass_fused_moe" (SM120) or "trtllm_fp4_block_scale_moe" (SM100)
    notes: list[str] = field(default_factory=list)

    def call_kwargs(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` restricted to what the installed ``fn`` accepts."""
        params = _params(fn)
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return dict(kwargs)
        kept = {k: v for k, v in kwargs.items() if k in params}
        dropped = sorted(set(kwargs) - set(kept))
        if dropped:
            note = f"{fn.__name__}: installed FlashInfer has no {', '.join(dropped)}; not passed"
            if note not in self.notes:
                self.notes.append(note)
        return kept


def make_plan(arch: str) -> FlashInferPlan:
    import flashinfer
    from flashinfer import fused_moe

    if arch not in ("sm100", "sm120"):
        raise ValueError(
            f"GLM-5-NVFP4 layers need an NVFP4-capable Blackwell device (sm100 or sm120), got {arch!r}; "
            "SGLang falls back to Marlin W4A16 below SM100, which this target does not model"
        )
    notes: list[str] = []

    quant_kwargs: dict[str, Any] = {}
    qparams = _params(flashinfer.fp4_quantize)
    if "backend" in qparams:
        want = "cute-dsl" if arch == "sm100" else "cuda"
        if want == "cute-dsl" and not _cute_dsl_available():
            notes.append(
                "fp4_quantize: SGLang passes backend='cute-dsl' on SM100; CuTe-DSL needs "
                "nvidia-cutlass-dsl and a CUDA driver (none on an emulated device), so backend='cuda'"
            )
            want = "cuda"
        quant_kwargs["backend"] = want

    sglang_gemm = "cute-dsl" if arch == "sm100" else "cutlass"
    offered = _literal_values(_params(flashinfer.mm_fp4)["backend"])
    gemm = sglang_gemm
    if gemm not in offered:
        notes.append(f"mm_fp4: installed FlashInfer offers {list(offered)}, not SGLang's {gemm!r}; using 'cutlass'")
        gemm = "cutlass"
    elif gemm == "cute-dsl" and not _cute_dsl_available():
        notes.append(
            "mm_fp4: SGLang's SM100 default backend 'cute-dsl' needs nvidia-cutlass-dsl and "
            "a CUDA driver (none on an emulated device); using 'cutlass'"
        )
        gemm = "cutlass"

    moe = "trtllm_fp4_block_scale_moe" if arch == "sm100" else "cutlass_fused_moe"
    if not hasattr(fused_moe, moe):
        raise ValueError(f"installed FlashInfer {flashinfer.__version__} has no fused_moe.{moe}")
    return FlashInferPlan(arch, flashinfer.__version__, quant_kwargs, gemm, moe, notes)

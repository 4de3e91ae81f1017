"""GLM-5 weights at real shapes, as fake CUDA tensors.

Two stages, as in SGLang:
1. what the checkpoint stores, in the parameters SGLang creates for it
   (``ModelOptFp4LinearMethod.create_weights`` / ``ModelOptNvFp4FusedMoEMethod
   .create_weights`` in ``layers/quantization/modelopt_quant.py``): packed e2m1
   ``uint8 [N, K/2]``, ``float8_e4m3fn`` block scales ``[N, K/16]``, fp32
   global scales;
2. what ``process_weights_after_loading`` turns that into for the kernels
   (padded, swizzled block scales, ``alpha``, inverse input scales).

Every tensor is ``torch.empty(..., device="cuda")``; inside the emulated
device (a FakeTensorMode) none of it allocates memory, and the processing
steps below are real torch ops that run on fake tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
FP32 = torch.float32
U8 = torch.uint8
NVFP4_BLOCK = 16
# CUTLASS/FlashInfer FP4 GEMMs need N and K divisible by 32
# (modelopt_quant.py: FP4_GEMM_ALIGNMENT).
FP4_GEMM_ALIGNMENT = 32

NVFP4_FORMAT = "nvfp4 (uint8 e2m1 packed [N, K/2], float8_e4m3fn block scales [N, K/16] per 16, fp32 global scales)"
BF16_FORMAT = "bf16"


def round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def empty(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="cuda")


def contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t.contiguous()`` for build-time weight processing. Same result; but
    ``Tensor.contiguous``'s Python binding takes a CUDA device guard, which a
    CPU-only torch cannot give a fake CUDA tensor, while ``clone`` dispatches
    straight to the fake mode."""
    return t.clone(memory_format=torch.contiguous_format)


def swizzle_blockscale(scale: torch.Tensor) -> torch.Tensor:
    """SGLang ``layers/quantization/utils.py: swizzle_blockscale``: pad rows to
    128 and columns to 4, then the 128x4 interleave CUTLASS reads."""
    assert scale.dtype == FP8, scale.dtype
    squeeze = scale.ndim == 2
    s = scale.unsqueeze(0) if squeeze else scale
    b, m, k = s.shape
    mp, kp = round_up(m, 128), round_up(k, 4)
    padded = torch.zeros((b, mp, kp), dtype=s.dtype, device=s.device)
    padded[:b, :m, :k] = s
    padded = padded.reshape(b, mp // 128, 4, 32, kp // 4, 4).permute(0, 1, 4, 3, 2, 5)
    padded = contiguous(padded)
    return padded.reshape(mp, kp) if squeeze else padded.reshape(b, mp, kp)


@dataclass
class Bf16Linear:
    prefix: str
    weight: torch.Tensor  # [N, K] bf16

    def checkpoint(self) -> dict[str, torch.Tensor]:
        return {f"{self.prefix}.weight": self.weight}


def bf16_linear(prefix: str, n: int, k: int) -> Bf16Linear:
    return Bf16Linear(prefix, empty(n, k, dtype=BF16))


@dataclass
class Nvfp4Linear:
    """One NVFP4 linear (possibly merged, e.g. gate_up = [gate; up])."""

    prefix: str
    out_features: int
    in_features: int
    # -- as loaded (create_weights)
    weight: torch.Tensor  # uint8 [N, K/2]
    weight_scale: torch.Tensor  # fp8 [N, K/16]
    weight_scale_2: torch.Tensor  # fp32 [n_partitions]
    input_scale: torch.Tensor  # fp32 [n_partitions]
    # -- after process_weights_after_loading
    weight_padded: torch.Tensor = field(init=False)
    weight_scale_interleaved: torch.Tensor = field(init=False)
    alpha: torch.Tensor = field(init=False)  # fp32 scalar = input_scale * weight_scale_2
    input_scale_inv: torch.Tensor = field(init=False)  # fp32 scalar
    weights_padding_cols: int = field(init=False)

    def __post_init__(self) -> None:
        # ModelOptFp4LinearMethod.process_weights_after_loading (non-Marlin,
        # non-TRTLLM GEMM backends: cutlass / cudnn / cute-dsl).
        input_scale_2 = self.input_scale.max().to(FP32)
        weight_scale_2 = self.weight_scale_2.max().to(FP32)
        self.alpha = (input_scale_2 * weight_scale_2).to(FP32)
        self.input_scale_inv = (1 / input_scale_2).to(FP32)
        n, kb = self.weight.shape
        pad_rows = round_up(n, FP4_GEMM_ALIGNMENT) - n
        pad_cols = (round_up(kb * 2, FP4_GEMM_ALIGNMENT) - kb * 2) // 2
        w = self.weight
        if pad_rows or pad_cols:
            w = contiguous(torch.nn.functional.pad(w, (0, pad_cols, 0, pad_rows)))
        self.weight_padded = w
        self.weights_padding_cols = pad_cols
        self.weight_scale_interleaved = swizzle_blockscale(self.weight_scale)

    def checkpoint(self) -> dict[str, torch.Tensor]:
        p = self.prefix
        return {
            f"{p}.weight": self.weight,
            f"{p}.weight_scale": self.weight_scale,
            f"{p}.weight_scale_2": self.weight_scale_2,
            f"{p}.input_scale": self.input_scale,
        }


def nvfp4_linear(prefix: str, partitions: list[int], k: int) -> Nvfp4Linear:
    if k % NVFP4_BLOCK:
        raise ValueError(f"{prefix}: in features {k} not a multiple of {NVFP4_BLOCK}")
    n = sum(partitions)
    return Nvfp4Linear(
        prefix,
        n,
        k,
        weight=empty(n, k // 2, dtype=U8),
        weight_scale=empty(n, k // NVFP4_BLOCK, dtype=FP8),
        weight_scale_2=empty(len(partitions), dtype=FP32),
        input_scale=empty(len(partitions), dtype=FP32),
    )


@dataclass
class Nvfp4Experts:
    """Stacked NVFP4 experts as SGLang's FusedMoE holds them after loading
    (``ModelOptNvFp4FusedMoEMethod.create_weights``), one row per expert."""

    prefix: str
    num_experts: int
    hidden: int
    intermediate: int  # per TP rank
    w13_weight: torch.Tensor  # uint8 [E, 2I, H/2]
    w13_weight_scale: torch.Tensor  # fp8 [E, 2I, H/16]
    w13_weight_scale_2: torch.Tensor  # fp32 [E, 2] (w1, w3)
    w13_input_scale: torch.Tensor  # fp32 [E, 2]
    w2_weight: torch.Tensor  # uint8 [E, H, I/2]
    w2_weight_scale: torch.Tensor  # fp8 [E, H, I/16]
    w2_weight_scale_2: torch.Tensor  # fp32 [E]
    w2_input_scale: torch.Tensor  # fp32 [E]

    def checkpoint(self) -> dict[str, torch.Tensor]:
        names = (
            "w13_weight w13_weight_scale w13_weight_scale_2 w13_input_scale "
            "w2_weight w2_weight_scale w2_weight_scale_2 w2_input_scale"
        ).split()
        return {f"{self.prefix}.{n}": getattr(self, n) for n in names}

    def concat(self, other: "Nvfp4Experts", prefix: str) -> "Nvfp4Experts":
        """Append ``other``'s experts (SGLang fuses the shared expert in as
        the last expert slot)."""
        cat = lambda a, b: torch.cat([a, b], dim=0)  # noqa: E731
        return Nvfp4Experts(
            prefix,
            self.num_experts + other.num_experts,
            self.hidden,
            self.intermediate,
            *(cat(getattr(self, n), getattr(other, n)) for n in (
                "w13_weight", "w13_weight_scale", "w13_weight_scale_2", "w13_input_scale",
                "w2_weight", "w2_weight_scale", "w2_weight_scale_2", "w2_input_scale",
            )),
        )


def nvfp4_experts(prefix: str, num_experts: int, hidden: int, intermediate: int) -> Nvfp4Experts:
    e, h, i = num_experts, hidden, intermediate
    if i % FP4_GEMM_ALIGNMENT or h % FP4_GEMM_ALIGNMENT:
        raise ValueError(f"{prefix}: hidden {h} / intermediate {i} per rank must be multiples of {FP4_GEMM_ALIGNMENT}")
    return Nvfp4Experts(
        prefix, e, h, i,
        w13_weight=empty(e, 2 * i, h // 2, dtype=U8),
        w13_weight_scale=empty(e, 2 * i, h // NVFP4_BLOCK, dtype=FP8),
        w13_weight_scale_2=empty(e, 2, dtype=FP32),
        w13_input_scale=empty(e, 2, dtype=FP32),
        w2_weight=empty(e, h, i // 2, dtype=U8),
        w2_weight_scale=empty(e, h, i // NVFP4_BLOCK, dtype=FP8),
        w2_weight_scale_2=empty(e, dtype=FP32),
        w2_input_scale=empty(e, dtype=FP32),
    )


@dataclass
class MoeKernelWeights:
    """``ModelOptNvFp4FusedMoEMethod.process_weights_after_loading`` for the
    FlashInfer CUTLASS / TRT-LLM MoE backends: one input scale for all experts
    (the max), per-expert alphas, and the backend's weight layout."""

    g1_alphas: torch.Tensor  # fp32 [E]
    g2_alphas: torch.Tensor  # fp32 [E]
    w13_input_scale_quant: torch.Tensor  # fp32 scalar
    w2_input_scale_quant: torch.Tensor  # fp32 scalar
    # cutlass_fused_moe (SM120)
    w13_blockscale_swizzled: torch.Tensor | None = None  # fp8 [E, pad128(2I), pad4(H/16)]
    w2_blockscale_swizzled: torch.Tensor | None = None  # fp8 [E, pad128(H), pad4(I/16)]
    # trtllm_fp4_block_scale_moe (SM100)
    gemm1_weights_fp4_shuffled: torch.Tensor | None = None
    gemm1_scales_fp4_shuffled: torch.Tensor | None = None
    gemm2_weights_fp4_shuffled: torch.Tensor | None = None
    gemm2_scales_fp4_shuffled: torch.Tensor | None = None
    g1_scale_c: torch.Tensor | None = None  # fp32 [E]


def process_moe(ex: Nvfp4Experts, backend: str) -> MoeKernelWeights:
    w13_weight_scale_2 = ex.w13_weight_scale_2[:, 0]
    w13_input_scale = ex.w13_input_scale.max().to(FP32)
    w2_input_scale = ex.w2_input_scale.max().to(FP32)
    kw = MoeKernelWeights(
        g1_alphas=(w13_input_scale * w13_weight_scale_2).to(FP32),
        g2_alphas=(w2_input_scale * ex.w2_weight_scale_2).to(FP32),
        w13_input_scale_quant=(1 / w13_input_scale).to(FP32),
        w2_input_scale_quant=(1 / w2_input_scale).to(FP32),
    )
    if backend == "cutlass_fused_moe":
        kw.w13_blockscale_swizzled = swizzle_blockscale(ex.w13_weight_scale)
        kw.w2_blockscale_swizzled = swizzle_blockscale(ex.w2_weight_scale)
    elif backend == "trtllm_fp4_block_scale_moe":
        # SGLang moe_runner/flashinfer_trtllm.py: align_fp4_moe_weights_for_flashinfer_trtllm
        # -> prepare_static_weights_for_trtllm_fp4_moe reorders rows for the
        # gated GEMM and shuffles weights / scales (shuffle_matrix_a,
        # shuffle_matrix_sf_a, epilogue tile 128). Those are permutations: the
        # shapes and dtypes stay [E, 2I, H/2] uint8 / [E, 2I, H/16] fp8, which is
        # all a fake tensor carries.
        kw.gemm1_weights_fp4_shuffled = torch.empty_like(ex.w13_weight)
        kw.gemm1_scales_fp4_shuffled = torch.empty_like(ex.w13_weight_scale)
        kw.gemm2_weights_fp4_shuffled = torch.empty_like(ex.w2_weight)
        kw.gemm2_scales_fp4_shuffled = torch.empty_like(ex.w2_weight_scale)
        kw.g1_scale_c = (kw.w2_input_scale_quant * kw.g1_alphas).to(FP32)
    else:
        raise ValueError(f"unknown MoE backend {backend!r}")
    return kw

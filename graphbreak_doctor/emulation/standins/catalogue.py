"""Fakes for the kernel-library ops whose outputs a schema cannot tell: one
entry per op, by its qualified name (``namespace::name``), with what its
output is. An op the framework registers a fake for never needs one here.

``HOST_ANSWERS``: ops that take no tensor and answer a question about the
build for a device (which kernels the library was compiled with), which a
framework asks at import or set-up time, outside any trace: the answer the
library gives on a device of that compute capability, and why."""

from __future__ import annotations

from typing import Any, Callable

import torch


def _alias_of_input(tensor: torch.Tensor) -> torch.Tensor:
    # A view of the same memory, sizes and strides, that does not keep the
    # memory alive (the CUDA-graph runners' weak references).
    return tensor.new_empty_strided(tensor.size(), tensor.stride())


# name -> (the fake, what its output is in words)
FAKES: dict[str, tuple[Callable[..., Any], str]] = {
    "sgl_kernel::weak_ref_tensor": (_alias_of_input, "a tensor with the input's sizes and strides"),
    "_C::weak_ref_tensor": (_alias_of_input, "a tensor with the input's sizes and strides"),
}


def _capability_at_least(lowest: int) -> Callable[[int], bool]:
    def answer(capability: int) -> bool:
        return int(capability) >= lowest
    return answer


def _capability_in(*families: int) -> Callable[[int], bool]:
    def answer(capability: int) -> bool:
        return int(capability) // 10 * 10 in families
    return answer


# qualified name -> (the answer, in words). vLLM's kernel library: which of
# its CUTLASS kernels a device of the given capability (major * 10 + minor)
# has, as the library's own capability checks decide.
HOST_ANSWERS: dict[str, tuple[Callable[..., Any], str]] = {
    "_C::cutlass_scaled_mm_supports_fp8": (_capability_at_least(89), "FP8 scaled matmul from SM89 on"),
    "_C::cutlass_scaled_mm_supports_block_fp8": (_capability_at_least(90), "block-scaled FP8 matmul from SM90 on"),
    "_C::cutlass_scaled_mm_supports_fp4": (_capability_at_least(100), "FP4 matmul from SM100 on"),
    "_C::cutlass_group_gemm_supported": (_capability_in(90, 100), "grouped GEMM on SM90 and SM100"),
    "_C::mxfp4_experts_quant_supported": (_capability_at_least(100), "MXFP4 expert quantization from SM100 on"),
    "_moe_C::moe_permute_unpermute_supported": (lambda: True, "the MoE permute kernels are built"),
    # DeepGEMM's op library (vLLM bundles it): its JIT's set-up does nothing
    # here, and its SM count is the device's (DeepGEMM's default).
    "deep_gemm::init": (lambda *args, **kwargs: None, "its JIT's set-up does nothing"),
    "deep_gemm::get_num_sms": (lambda: torch.cuda.get_device_properties(0).multi_processor_count,
                               "the device's SM count"),
    # The rows (M) and depth (K) a contiguous grouped GEMM pads each expert's
    # block to: DeepGEMM's block size for that layout, a constant of the
    # library (vLLM's DeepGEMM experts ask when they are built).
    "deep_gemm::get_mk_alignment_for_contiguous_layout": (lambda: 128, "DeepGEMM's contiguous-layout alignment, 128"),
    "deep_gemm::get_theoretical_mk_alignment_for_contiguous_layout": (
        lambda: 128, "DeepGEMM's contiguous-layout alignment, 128"),
}


def answered(qualname: str) -> bool:
    return qualname in HOST_ANSWERS

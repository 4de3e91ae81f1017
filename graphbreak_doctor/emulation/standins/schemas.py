"""The op schemas the stand-ins declare: those compiled into sgl-kernel's
``common_ops`` and torchvision's ``_C`` (kept here, since reading them from
the binary costs 13 s for sgl-kernel 0.3.21's 370 MB library), and the
reader of schema strings in a binary, for the smaller libraries declared
whole and for the test that compares the kept ones with the installed
binaries."""

from __future__ import annotations

import re
from pathlib import Path

# The schema strings sgl-kernel's common_ops binary declares (its op library
# "sgl_kernel"), for the ops SGLang's import and its MLP/MoE code paths reach.
SGL_KERNEL_SCHEMAS = {
    "fused_add_rmsnorm": "fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, bool enable_pdl) -> ()",
    "rmsnorm": "rmsnorm(Tensor! output, Tensor input, Tensor weight, float eps, bool enable_pdl) -> ()",
    "silu_and_mul": "silu_and_mul(Tensor! out, Tensor input) -> ()",
    "sgl_per_token_group_quant_8bit": "sgl_per_token_group_quant_8bit(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, float eps, float fp8_min, float fp8_max, bool scale_ue8m0) -> ()",
    "sgl_per_token_quant_fp8": "sgl_per_token_quant_fp8(Tensor input, Tensor! output_q, Tensor! output_s) -> ()",
    "fp8_scaled_mm": "fp8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, ScalarType out_dtype, Tensor? bias) -> Tensor",
    "moe_fused_gate": "moe_fused_gate(Tensor input, Tensor bias, int num_expert_group, int topk_group, int topk, int num_fused_shared_experts, float routed_scaling_factor, bool apply_routed_scaling_factor_on_output) -> (Tensor[])",
    "scaled_fp4_quant": "scaled_fp4_quant(Tensor! output, Tensor! input, Tensor! output_scale, Tensor! input_scale) -> ()",
    # The DSA indexer's top-k (whole decoder layers).
    "fast_topk": "fast_topk(Tensor score, Tensor indices, Tensor lengths, Tensor? row_starts) -> ()",
    "fast_topk_transform_fused": "fast_topk_transform_fused(Tensor score, Tensor lengths, Tensor dst_page_table, Tensor src_page_table, Tensor cu_seqlens_q, Tensor? row_starts) -> ()",
    "fast_topk_transform_ragged_fused": "fast_topk_transform_ragged_fused(Tensor score, Tensor lengths, Tensor topk_indices_ragged, Tensor topk_indices_offset, Tensor ? row_starts) -> ()",
    # MLA's query and key concatenation (older releases' sparse attention).
    "concat_mla_absorb_q": "concat_mla_absorb_q(Tensor a, Tensor b, Tensor! out) -> ()",
    "concat_mla_k": "concat_mla_k(Tensor! k, Tensor k_nope, Tensor k_rope) -> ()",
}

# torchvision/csrc/ops/nms.cpp and ops/quantized/cpu/qnms_kernel.cpp.
TORCHVISION_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}

_SCHEMA = re.compile(rb"(?<![A-Za-z0-9_])([a-z_0-9]+)\(([^\x00]*?)\) -> ([^\x00]*?)\x00")


def schemas_in(binary: Path) -> list[str]:
    """Every schema string ``binary`` declares, in the order its bytes hold them."""
    return [m.group(0)[:-1].decode() for m in _SCHEMA.finditer(binary.read_bytes())]


def binary_schemas(path: str | Path, names: tuple[str, ...] = tuple(SGL_KERNEL_SCHEMAS)) -> dict[str, str]:
    """The schema strings an op library declares for ``names``, whitespace
    normalized (what a test compares ``SGL_KERNEL_SCHEMAS`` with)."""
    data = Path(path).read_bytes()
    out: dict[str, str] = {}
    for name in names:
        start = data.find(b"\x00" + name.encode() + b"(")
        while start >= 0:
            end = data.find(b"\x00", start + 1)
            m = _SCHEMA.fullmatch(data[start + 1:end + 1])
            if m:
                out[name] = " ".join(m.group(0)[:-1].decode().split())
                break
            start = data.find(b"\x00" + name.encode() + b"(", start + 1)
    return out

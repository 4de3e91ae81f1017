"""GLM-5 decoder layers (dense: 0-2, MoE: 3-77) as SGLang runs them.

SGLang: ``models/glm4_moe.py`` (``GlmMoeDsaForCausalLM`` subclasses
``DeepseekV2ForCausalLM``), ``models/deepseek_v2.py``
(``DeepseekV2DecoderLayer``, ``DeepseekV2AttentionMLA.forward_absorb``,
``DeepseekV2MLP``, ``DeepseekV2MoE``), ``layers/quantization/modelopt_quant.py``
(``ModelOptFp4LinearMethod.apply``, ``ModelOptNvFp4FusedMoEMethod.apply``),
``layers/moe/topk.py`` (``biased_grouped_topk_gpu``) and
``layers/moe/moe_runner/flashinfer_trtllm.py``
(``fused_experts_none_to_flashinfer_trtllm_fp4``).

The FlashInfer functions are looked up on the ``flashinfer`` modules at call
time (``self.fi.fp4_quantize``), so Dynamo sees exactly the public API a
serving stack calls, and a fix that replaces one of them is picked up.
Norms, rope, SiLU-and-mul and routing glue are the ``forward_native`` torch
versions: on a GPU SGLang runs sgl-kernel fused kernels there, which are
registered ops and would not break a graph either.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import Glm5Config
from .flashinfer_plan import FlashInferPlan
from .weights import (
    BF16,
    FP8,
    FP32,
    Bf16Linear,
    Nvfp4Linear,
    bf16_linear,
    contiguous,
    empty,
    nvfp4_experts,
    nvfp4_linear,
    process_moe,
)


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 1


# --------------------------------------------------------------------- torch glue


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # SGLang layers/layernorm.py: RMSNorm.forward_native
    dtype = x.dtype
    x = x.to(FP32)
    x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (x * weight.to(FP32)).to(dtype)


def fused_add_rms_norm(x, residual, weight, eps):
    # RMSNorm.forward_native with a residual: add, keep the sum, normalize it.
    residual = (x.to(FP32) + residual.to(FP32)).to(x.dtype)
    return rms_norm(residual, weight, eps), residual


def rope_cache(rot_dim: int, max_pos: int, theta: float) -> torch.Tensor:
    # layers/rotary_embedding.py: RotaryEmbedding._compute_cos_sin_cache
    inv_freq = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, dtype=FP32, device="cuda") / rot_dim))
    t = torch.arange(max_pos, dtype=FP32, device="cuda")
    freqs = torch.outer(t, inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)  # [max_pos, rot_dim]


def apply_rope(positions: torch.Tensor, x: torch.Tensor, cache: torch.Tensor, neox: bool) -> torch.Tensor:
    # RotaryEmbedding.forward_native on [T, heads, rot] (or [T, rot]).
    cos, sin = cache.index_select(0, positions).chunk(2, dim=-1)
    if x.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    xf = x.to(FP32)
    if neox:
        x1, x2 = xf.chunk(2, dim=-1)
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        # GLM-5's MLA rope is interleaved (rope_interleave=true; SGLang
        # DeepseekV2AttentionMLA builds get_rope(..., is_neox_style=False)).
        x1, x2 = xf[..., ::2], xf[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return out.to(x.dtype)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    # layers/activation.py: SiluAndMul.forward_native
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


# ------------------------------------------------------------------- attention


class MlaAttention(nn.Module):
    """DeepseekV2AttentionMLA.forward_absorb with the DSA (NSA) indexer, BF16.

    TP shards the heads (q_b_proj, kv_b_proj column-parallel; o_proj
    row-parallel + all-reduce); fused_qkv_a_proj_with_mqa and the indexer are
    replicated.
    """

    def __init__(self, cfg: Glm5Config, index: int, tp: int):
        super().__init__()
        p = f"model.layers.{index}.self_attn"
        self.tp = tp
        self.heads = cfg.num_attention_heads // tp
        self.q_lora, self.kv_lora = cfg.q_lora_rank, cfg.kv_lora_rank
        self.nope, self.rope_dim, self.v_dim = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        self.eps = cfg.rms_norm_eps
        self.scaling = (self.nope + self.rope_dim) ** -0.5
        h = cfg.hidden_size
        # Checkpoint names q_a_proj and kv_a_proj_with_mqa; SGLang loads them
        # into one fused_qkv_a_proj_with_mqa [q_lora + kv_lora + rope, H].
        self.fused_qkv_a = bf16_linear(f"{p}.fused_qkv_a_proj_with_mqa", self.q_lora + self.kv_lora + self.rope_dim, h)
        self.q_a_layernorm = empty(self.q_lora, dtype=BF16)
        self.kv_a_layernorm = empty(self.kv_lora, dtype=BF16)
        self.q_b_proj = bf16_linear(f"{p}.q_b_proj", self.heads * (self.nope + self.rope_dim), self.q_lora)
        self.kv_b_proj = bf16_linear(f"{p}.kv_b_proj", self.heads * (self.nope + self.v_dim), self.kv_lora)
        self.o_proj = bf16_linear(f"{p}.o_proj", h, self.heads * self.v_dim)
        # process_weights_after_loading: w_kc [H, nope, kv_lora], w_vc [H, kv_lora, v]
        w_kc, w_vc = self.kv_b_proj.weight.unflatten(0, (-1, self.nope + self.v_dim)).split([self.nope, self.v_dim], dim=1)
        self.w_kc = contiguous(w_kc)
        self.w_vc = contiguous(w_vc).transpose(1, 2)
        # DSA indexer (HF GlmMoeDsaIndexer / SGLang nsa/nsa_indexer.py: Indexer)
        self.index_heads, self.index_dim, self.index_topk = cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk
        self.wq_b = bf16_linear(f"{p}.indexer.wq_b", self.index_heads * self.index_dim, self.q_lora)
        self.wk = bf16_linear(f"{p}.indexer.wk", self.index_dim, h)
        self.k_norm_weight = empty(self.index_dim, dtype=BF16)
        self.k_norm_bias = empty(self.index_dim, dtype=BF16)
        self.weights_proj = bf16_linear(f"{p}.indexer.weights_proj", self.index_heads, h)
        self.rope_cache = rope_cache(self.rope_dim, cfg.max_position_embeddings, cfg.rope_theta)
        self.index_rope_neox = not cfg.values.get("indexer_rope_interleave", False)

    def linears(self) -> list[Bf16Linear]:
        return [self.fused_qkv_a, self.q_b_proj, self.kv_b_proj, self.o_proj, self.wq_b, self.wk, self.weights_proj]

    def indexer(self, positions, hidden_states, q_a):
        t = hidden_states.shape[0]
        q = F.linear(q_a, self.wq_b.weight).view(t, self.index_heads, self.index_dim)
        q_pe, q_nope = q.split([self.rope_dim, self.index_dim - self.rope_dim], dim=-1)
        q = torch.cat([apply_rope(positions, q_pe, self.rope_cache, self.index_rope_neox), q_nope], dim=-1)
        k = F.layer_norm(F.linear(hidden_states, self.wk.weight), (self.index_dim,), self.k_norm_weight, self.k_norm_bias, 1e-6)
        k_pe, k_nope = k.split([self.rope_dim, self.index_dim - self.rope_dim], dim=-1)
        k = torch.cat([apply_rope(positions, k_pe, self.rope_cache, self.index_rope_neox), k_nope], dim=-1)
        weights = F.linear(hidden_states, self.weights_proj.weight).to(FP32)
        weights = weights * (self.index_heads**-0.5) * (self.index_dim**-0.5)
        # SGLang also Hadamard-rotates q/k and quantizes them to FP8 before
        # DeepGEMM's MQA-logits kernel; those are kernels, inside this op.
        return torch.ops.graphbreak_doctor.dsa_indexer_topk(q, k, weights, self.index_topk)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        t = hidden_states.shape[0]
        qkv_a = F.linear(hidden_states, self.fused_qkv_a.weight)
        q_a, latent = qkv_a.split([self.q_lora, self.kv_lora + self.rope_dim], dim=-1)
        q_a = rms_norm(q_a, self.q_a_layernorm, self.eps)
        q = F.linear(q_a, self.q_b_proj.weight).view(t, self.heads, self.nope + self.rope_dim)
        q_nope, q_pe = q.split([self.nope, self.rope_dim], dim=-1)
        kv_c, k_pe = latent.split([self.kv_lora, self.rope_dim], dim=-1)
        kv_c = rms_norm(kv_c, self.kv_a_layernorm, self.eps)
        q_nope_out = torch.bmm(q_nope.transpose(0, 1), self.w_kc).transpose(0, 1)  # [T, H, kv_lora]
        q_pe = apply_rope(positions, q_pe, self.rope_cache, neox=False)
        k_pe = apply_rope(positions, k_pe, self.rope_cache, neox=False)
        topk_indices = self.indexer(positions, hidden_states, q_a)
        attn = torch.ops.graphbreak_doctor.mla_attention(q_nope_out, q_pe, kv_c, k_pe, topk_indices, self.scaling)
        out = torch.bmm(attn.transpose(0, 1), self.w_vc).transpose(0, 1).flatten(1)  # [T, H*v]
        out = F.linear(out, self.o_proj.weight)
        if self.tp > 1:
            out = torch.ops.graphbreak_doctor.all_reduce(out)
        return out


# ------------------------------------------------------------------------- MLPs


class Nvfp4LinearCall:
    """ModelOptFp4LinearMethod.apply through FlashInfer: fp4_quantize then mm_fp4."""

    def __init__(self, lin: Nvfp4Linear, fi: Any, plan: FlashInferPlan):
        self.lin, self.fi, self.plan = lin, fi, plan

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        lin = self.lin
        x_fp4, x_sf = self.fi.fp4_quantize(x, lin.input_scale_inv, **self.plan.fp4_quantize_kwargs)
        if lin.weights_padding_cols:
            x_fp4 = F.pad(x_fp4, (0, lin.weights_padding_cols)).contiguous()
        out = self.fi.mm_fp4(
            x_fp4,
            lin.weight_padded.T,
            x_sf,
            lin.weight_scale_interleaved.T,
            lin.alpha,
            x.dtype,
            backend=self.plan.mm_fp4_backend,
        )
        if out.shape[-1] != lin.out_features:
            out = out[..., : lin.out_features].contiguous()
        return out.view(x.shape[0], lin.out_features)


class Bf16LinearCall:
    def __init__(self, lin: Bf16Linear):
        self.lin = lin

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.lin.weight)


class GatedMlp(nn.Module):
    """DeepseekV2MLP: gate_up_proj (merged column-parallel) -> SiLU-and-mul ->
    down_proj (row-parallel). ``reduce=False`` for the shared expert, whose
    output is summed with the routed experts before the all-reduce."""

    def __init__(self, prefix: str, hidden: int, inter: int, tp: int, nvfp4: bool, fi, plan, reduce: bool):
        super().__init__()
        inter_rank = inter // tp
        self.tp, self.reduce = (tp, reduce)
        if nvfp4:
            self.gate_up = nvfp4_linear(f"{prefix}.gate_up_proj", [inter_rank, inter_rank], hidden)
            self.down = nvfp4_linear(f"{prefix}.down_proj", [hidden], inter_rank)
            self._gate_up, self._down = Nvfp4LinearCall(self.gate_up, fi, plan), Nvfp4LinearCall(self.down, fi, plan)
        else:
            self.gate_up = bf16_linear(f"{prefix}.gate_up_proj", 2 * inter_rank, hidden)
            self.down = bf16_linear(f"{prefix}.down_proj", hidden, inter_rank)
            self._gate_up, self._down = Bf16LinearCall(self.gate_up), Bf16LinearCall(self.down)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._down(silu_and_mul(self._gate_up(x)))
        if self.reduce and self.tp > 1:
            out = torch.ops.graphbreak_doctor.all_reduce(out)
        return out


class Moe(nn.Module):
    """DeepseekV2MoE with ModelOpt NVFP4 experts on FlashInfer."""

    def __init__(self, cfg: Glm5Config, index: int, tp: int, fi, fused_moe, plan: FlashInferPlan):
        super().__init__()
        p = f"model.layers.{index}.mlp"
        h = cfg.hidden_size
        self.tp, self.fi, self.fused_moe, self.plan = tp, fi, fused_moe, plan
        self.hidden = h
        self.num_experts = cfg.n_routed_experts
        self.top_k = cfg.num_experts_per_tok
        self.n_group, self.topk_group = cfg.n_group, cfg.topk_group
        self.routed_scaling_factor = float(cfg.routed_scaling_factor)
        self.inter_rank = cfg.moe_intermediate_size // tp
        # Router: BF16 weight (excluded from quantization), fp32 bias.
        self.gate = bf16_linear(f"{p}.gate", self.num_experts, h)
        self.e_score_correction_bias = empty(self.num_experts, dtype=FP32)
        if not cfg.quant.is_nvfp4(f"{p}.experts"):
            raise ValueError("the quantization profile leaves the routed experts unquantized; GLM-5-NVFP4 targets need NVFP4 experts")
        self.experts = nvfp4_experts(f"{p}.experts", self.num_experts, h, self.inter_rank)
        shared_inter = cfg.moe_intermediate_size * cfg.n_shared_experts
        shared_nvfp4 = cfg.quant.is_nvfp4(f"{p}.shared_experts")
        # SM120 (cutlass_fused_moe): SGLang fuses the shared expert into the
        # routed kernel as one more expert (id = n_routed_experts), routed with
        # a fixed weight (topk.py: biased_grouped_topk_gpu,
        # num_fused_shared_experts). That needs the shared expert in the
        # experts' format; SM100's trtllm kernel routes inside and takes no
        # extra expert, so there it stays a separate MLP.
        self.num_fused_shared = (
            cfg.n_shared_experts if plan.moe_backend == "cutlass_fused_moe" and shared_nvfp4 and cfg.n_shared_experts == 1 else 0
        )
        if self.num_fused_shared:
            self.shared_ckpt = nvfp4_experts(f"{p}.shared_experts", 1, h, shared_inter // tp)
            self.kernel_experts = self.experts.concat(self.shared_ckpt, f"{p}.experts+shared")
            self.shared = None
        else:
            self.shared_ckpt = None
            self.kernel_experts = self.experts
            self.shared = GatedMlp(f"{p}.shared_experts", h, shared_inter, tp, shared_nvfp4, fi, plan, reduce=False)
        self.kw = process_moe(self.kernel_experts, plan.moe_backend)

    # -- SM120: SGLang top-k (torch) + FlashInfer cutlass_fused_moe
    def _select_experts(self, x: torch.Tensor, router_logits: torch.Tensor):
        """SGLang ``layers/moe/topk.py: biased_grouped_topk_impl`` (noaux_tc).

        Why not FlashInfer's ``fused_topk_deepseek``: SGLang's
        ``biased_grouped_topk_gpu`` only calls it when ``topk_group * n_group
        >= topk`` (FlashInfer's ``_check_dsv3_fused_routing_supported`` raises
        otherwise); GLM-5 has n_group = topk_group = 1 and top-k 8, so SGLang
        falls through to this torch implementation (its other CUDA kernels
        need n_group > 1, or no fused shared expert). SGLang wraps it in
        ``torch.compile(dynamic=True)``; under the layer's own compile that is
        inlined, so it is plain code here.
        """
        topk = self.top_k + self.num_fused_shared
        scores = router_logits.to(FP32).sigmoid()
        t, e = scores.shape
        scores_for_choice = scores.view(t, -1) + self.e_score_correction_bias.unsqueeze(0)
        group_scores = scores_for_choice.view(t, self.n_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(t, self.n_group, e // self.n_group).reshape(t, -1)
        tmp_scores = scores_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
        _, topk_ids = torch.topk(tmp_scores, k=topk, dim=-1, sorted=self.num_fused_shared > 0)
        topk_weights = scores.gather(1, topk_ids)
        if self.num_fused_shared:
            # SGLang draws the id with torch.randint(num_experts, num_experts +
            # num_fused_shared); with one shared expert that is always
            # num_experts, written here without the RNG.
            topk_ids[:, -1] = self.num_experts
            topk_weights[:, -1] = topk_weights[:, :-1].sum(dim=-1) / self.routed_scaling_factor
            weights_sum = topk_weights[:, :-1].sum(dim=-1, keepdim=True)
        else:
            weights_sum = topk_weights.sum(dim=-1, keepdim=True)
        # norm_topk_prob (renormalize); ModelOpt NVFP4 folds
        # routed_scaling_factor into the weights (apply_routed_scaling_factor_on_output).
        topk_weights = topk_weights / weights_sum * self.routed_scaling_factor
        return topk_weights.to(FP32), topk_ids.to(torch.int32)

    def _cutlass(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        router_logits = F.linear(x, self.gate.weight)
        topk_weights, topk_ids = self._select_experts(x, router_logits)
        ex, kw = self.kernel_experts, self.kw
        output = torch.empty((t, self.hidden), dtype=torch.bfloat16, device=x.device)
        fn = self.fused_moe.cutlass_fused_moe
        out = fn(
            **self.plan.call_kwargs(
                fn,
                dict(
                    output=output,
                    input=x,
                    token_selected_experts=topk_ids.to(torch.int),
                    token_final_scales=topk_weights,
                    fc1_expert_weights=ex.w13_weight.view(torch.long),
                    fc2_expert_weights=ex.w2_weight.view(torch.long),
                    output_dtype=torch.bfloat16,
                    input_sf=None,
                    quant_scales=[
                        kw.w13_input_scale_quant,
                        kw.w13_blockscale_swizzled.view(torch.int32),
                        kw.g1_alphas,
                        kw.w2_input_scale_quant,
                        kw.w2_blockscale_swizzled.view(torch.int32),
                        kw.g2_alphas,
                    ],
                    ep_size=1,
                    ep_rank=0,
                    tp_size=self.tp,
                    tp_rank=0,
                    tune_max_num_tokens=next_power_of_2(t),
                    activation_type=self.fused_moe.ActivationType.Swiglu,
                    enable_alltoall=False,
                ),
            )
        )[0]
        return out

    # -- SM100: fp4_quantize (linear scale layout) + trtllm_fp4_block_scale_moe, routing inside
    def _trtllm(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        kw = self.kw
        router_logits = F.linear(x, self.gate.weight)
        # flashinfer_trtllm.py: quantize_hidden_states_fp4 (positional, as SGLang)
        hs_fp4, hs_sf = self.fi.fp4_quantize(x, kw.w13_input_scale_quant, 16, False, False, **self.plan.fp4_quantize_kwargs)
        hs_fp4 = hs_fp4.reshape(t, self.hidden // 2)
        hs_sf = hs_sf.view(FP8).reshape(t, self.hidden // 16)
        output = torch.empty((t, self.hidden), dtype=torch.bfloat16, device=x.device)
        fn = self.fused_moe.trtllm_fp4_block_scale_moe
        return fn(
            **self.plan.call_kwargs(
                fn,
                dict(
                    routing_logits=router_logits.to(FP32),  # DeepSeekV3 routing wants fp32
                    routing_bias=self.e_score_correction_bias.to(x.dtype),
                    hidden_states=hs_fp4,
                    hidden_states_scale=hs_sf.flatten(),
                    gemm1_weights=kw.gemm1_weights_fp4_shuffled,
                    gemm1_weights_scale=kw.gemm1_scales_fp4_shuffled.view(FP8),
                    gemm1_bias=None,
                    gemm1_alpha=None,
                    gemm1_beta=None,
                    gemm1_clamp_limit=None,
                    gemm2_weights=kw.gemm2_weights_fp4_shuffled,
                    gemm2_weights_scale=kw.gemm2_scales_fp4_shuffled.view(FP8),
                    gemm2_bias=None,
                    output1_scale_scalar=kw.g1_scale_c,
                    output1_scale_gate_scalar=kw.g1_alphas,
                    output2_scale_scalar=kw.g2_alphas,
                    num_experts=self.num_experts,
                    top_k=self.top_k,
                    n_group=self.n_group,
                    topk_group=self.topk_group,
                    intermediate_size=self.inter_rank,
                    local_expert_offset=0,
                    local_num_experts=self.num_experts,
                    routed_scaling_factor=self.routed_scaling_factor,
                    tile_tokens_dim=None,
                    routing_method_type=int(self.fused_moe.RoutingMethodType.DeepSeekV3),
                    do_finalize=True,
                    tune_max_num_tokens=next_power_of_2(t),
                    output=output,
                ),
            )
        )[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shared = self.shared(x) if self.shared is not None else None
        if self.plan.moe_backend == "cutlass_fused_moe":
            out = self._cutlass(x)
        else:
            out = self._trtllm(x)
        if shared is not None:
            out = out + shared
        if self.tp > 1:
            out = torch.ops.graphbreak_doctor.all_reduce(out)
        return out


# ----------------------------------------------------------------------- layer


class DecoderLayer(nn.Module):
    """DeepseekV2DecoderLayer.forward: (positions, hidden_states, residual) ->
    (hidden_states, residual); residual is None for layer 0."""

    def __init__(self, cfg: Glm5Config, index: int, kind: str, tp: int, fi=None, fused_moe=None, plan=None):
        super().__init__()
        h = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        self.input_layernorm = empty(h, dtype=BF16)
        self.post_attention_layernorm = empty(h, dtype=BF16)
        self.self_attn = MlaAttention(cfg, index, tp)
        self.kind = kind
        if kind == "dense":
            p = f"model.layers.{index}.mlp"
            self.mlp = GatedMlp(p, h, cfg.intermediate_size, tp, cfg.quant.is_nvfp4(f"{p}.gate_proj"), fi, plan, reduce=True)
        elif kind == "moe":
            self.mlp = Moe(cfg, index, tp, fi, fused_moe, plan)
        else:
            self.mlp = None  # attention only

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None):
        if residual is None:
            residual = hidden_states
            hidden_states = rms_norm(hidden_states, self.input_layernorm, self.eps)
        else:
            hidden_states, residual = fused_add_rms_norm(hidden_states, residual, self.input_layernorm, self.eps)
        hidden_states = self.self_attn(positions, hidden_states)
        hidden_states, residual = fused_add_rms_norm(hidden_states, residual, self.post_attention_layernorm, self.eps)
        if self.mlp is not None:
            hidden_states = self.mlp(hidden_states)
        return hidden_states, residual

    def checkpoint_tensors(self) -> dict[str, torch.Tensor]:
        """The layer's tensors in the form the checkpoint stores them (SGLang's
        parameter names; MoE experts stacked per expert)."""
        out: dict[str, torch.Tensor] = {}
        for lin in self.self_attn.linears():
            out.update(lin.checkpoint())
        mlp = self.mlp
        if isinstance(mlp, GatedMlp):
            out.update(mlp.gate_up.checkpoint())
            out.update(mlp.down.checkpoint())
        elif isinstance(mlp, Moe):
            out.update(mlp.gate.checkpoint())
            out[mlp.gate.prefix.rsplit(".", 1)[0] + ".gate.e_score_correction_bias"] = mlp.e_score_correction_bias
            out.update(mlp.experts.checkpoint())
            if mlp.shared_ckpt is not None:
                out.update(mlp.shared_ckpt.checkpoint())
            if mlp.shared is not None:
                out.update(mlp.shared.gate_up.checkpoint())
                out.update(mlp.shared.down.checkpoint())
        return out

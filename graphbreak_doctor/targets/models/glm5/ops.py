"""Opaque registered ops standing in for GLM-5's attention kernels.

SGLang runs MLA + DSA attention through backend kernels (FlashMLA /
FlashInfer / DeepGEMM under ``layers/attention/nsa_backend.py`` and
``nsa/nsa_indexer.py``) that Dynamo never traces into, and its piecewise
runner splits the FX graph at registered ops
(``compilation/compilation_config.py``). These are the same kind of thing:
``torch.library.custom_op`` with a fake, so Dynamo records one opaque node and
every break the doctor reports comes from elsewhere. They are not what the
tool diagnoses, so they must not swallow any projection, norm or rope: those
stay in the traced layer code.

Each op has a real (eager) implementation so the layer also runs on a real
GPU; on fake tensors only the fake runs.
"""

from __future__ import annotations

import torch

NAMESPACE = "graphbreak_doctor"
MLA_ATTENTION = f"{NAMESPACE}::mla_attention"
DSA_INDEXER_TOPK = f"{NAMESPACE}::dsa_indexer_topk"
ALL_REDUCE = f"{NAMESPACE}::all_reduce"


@torch.library.custom_op(MLA_ATTENTION, mutates_args=())
def mla_attention(
    q_nope: torch.Tensor,  # [T, H, kv_lora_rank], already absorbed through w_kc
    q_pe: torch.Tensor,  # [T, H, rope_dim]
    kv_c: torch.Tensor,  # [T, kv_lora_rank], normed latent
    k_pe: torch.Tensor,  # [T, rope_dim]
    topk_indices: torch.Tensor,  # [T, index_topk] int32, -1 = unused slot
    sm_scale: float,
) -> torch.Tensor:
    """Sparse MLA over the current tokens: each query attends to the
    (causal) positions the DSA indexer selected. Output [T, H, kv_lora_rank]."""
    t = q_nope.shape[0]
    q = torch.cat([q_nope, q_pe], dim=-1).float()
    kv = torch.cat([kv_c, k_pe], dim=-1).float()
    idx = topk_indices.long()
    pos = torch.arange(t, device=q.device).unsqueeze(1)
    valid = (idx >= 0) & (idx <= pos)
    keys = kv[idx.clamp(0, t - 1)]  # [T, K, D]
    scores = torch.einsum("thd,tkd->thk", q, keys) * sm_scale
    scores = scores.masked_fill(~valid.unsqueeze(1), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("thk,tkd->thd", probs, keys[..., : kv_c.shape[-1]])
    return out.to(q_nope.dtype)


@mla_attention.register_fake
def _(q_nope, q_pe, kv_c, k_pe, topk_indices, sm_scale):
    return q_nope.new_empty(q_nope.shape)


@torch.library.custom_op(DSA_INDEXER_TOPK, mutates_args=())
def dsa_indexer_topk(
    index_q: torch.Tensor,  # [T, n_heads, head_dim]
    index_k: torch.Tensor,  # [T, head_dim]
    weights: torch.Tensor,  # [T, n_heads] fp32, scales folded in
    index_topk: int,
) -> torch.Tensor:
    """DSA lightning indexer: score_t,s = sum_h w_t,h * relu(q_t,h . k_s),
    causal, top-``index_topk`` positions per token (-1 padded). SGLang does
    this with DeepGEMM's fp8 MQA-logits kernel and a top-k kernel."""
    t = index_q.shape[0]
    logits = torch.einsum("thd,sd->ths", index_q.float(), index_k.float()).relu()
    scores = torch.einsum("ths,th->ts", logits, weights.float())
    causal = torch.ones(t, t, dtype=torch.bool, device=scores.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    k = min(index_topk, t)
    top = scores.topk(k, dim=-1).indices.to(torch.int32)
    out = torch.full((t, index_topk), -1, dtype=torch.int32, device=index_q.device)
    out[:, :k] = top
    # A position beyond the causal horizon has score -inf: mark it unused.
    pos = torch.arange(t, device=index_q.device).unsqueeze(1)
    return torch.where(out <= pos, out, torch.full_like(out, -1))


@dsa_indexer_topk.register_fake
def _(index_q, index_k, weights, index_topk):
    return index_q.new_empty((index_q.shape[0], index_topk), dtype=torch.int32)


@torch.library.custom_op(ALL_REDUCE, mutates_args=())
def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Tensor-parallel sum, out of place. Stands in for SGLang's registered
    all-reduce (``distributed/parallel_state.py``: ``outplace_all_reduce``),
    one of the ops its piecewise runner splits at."""
    out = x.clone()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(out)
    return out


@all_reduce.register_fake
def _(x):
    return torch.empty_like(x)


# What each op stands for (the findings' ``opaque_ops``).
DESCRIPTIONS = {
    MLA_ATTENTION: "stands in for SGLang's sparse MLA attention backend kernel (FlashMLA / FlashInfer)",
    DSA_INDEXER_TOPK: "stands in for the DSA indexer's DeepGEMM fp8 MQA-logits and top-k kernels",
    ALL_REDUCE: "stands in for SGLang's registered tensor-parallel all-reduce",
}

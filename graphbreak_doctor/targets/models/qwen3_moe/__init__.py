"""Qwen3-30B-A3B (``Qwen3MoeForCausalLM``), bf16: a MoE model with no dense
layer, its config.json written from the published checkpoint's values
(``configs/``). A served model, declared in ``model.json``: SGLang builds it
from this folder (``--model-path qwen3-30b-a3b``)."""

"""Qwen3-30B-A3B (``Qwen3MoeForCausalLM``), bf16: a MoE model with no dense
layer, its config.json written from the published checkpoint's values
(``configs/``). A served model: SGLang builds it from this folder
(``--model-path qwen3-30b-a3b``)."""

from __future__ import annotations

from pathlib import Path

from graphbreak_doctor.targets.models.packaged import PackagedModel

MODEL = PackagedModel("qwen3-30b-a3b", "Qwen3-30B-A3B (bf16 MoE)", Path(__file__).resolve().parent / "configs")

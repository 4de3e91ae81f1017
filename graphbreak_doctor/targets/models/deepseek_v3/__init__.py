"""DeepSeek-V3 (``DeepseekV3ForCausalLM``), FP8 block-scaled: its config.json,
written from the published checkpoint's values (``configs/``). A served
model: SGLang builds it from this folder (``--model-path deepseek-v3``)."""

from __future__ import annotations

from pathlib import Path

from graphbreak_doctor.targets.models.packaged import PackagedModel

MODEL = PackagedModel("deepseek-v3", "DeepSeek-V3 (FP8 block-scaled)", Path(__file__).resolve().parent / "configs")

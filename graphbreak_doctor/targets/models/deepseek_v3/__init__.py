"""DeepSeek-V3 (``DeepseekV3ForCausalLM``), FP8 block-scaled: its config.json,
written from the published checkpoint's values (``configs/``). A served
model, declared in ``model.json``: SGLang builds it from this folder
(``--model-path deepseek-v3``)."""

"""GLM-5-NVFP4 (``GlmMoeDsaForCausalLM``): its packaged config folder
(``configs/``: config.json and ModelOpt's NVFP4 profiles; declared, as the
default, in ``model.json``), the NVFP4 quantization description (config.py),
and the project's re-creation of its decoder layers calling FlashInfer
directly (builder.py, ``--impl reference``).

The config reader (config.py) imports no torch; the builder (builder.py) does, and is loaded on first use of
``build_layer`` / ``build_attention``.
"""

from __future__ import annotations

from graphbreak_doctor.targets.models.glm5.config import Glm5Config, QuantProfile, default_config_dir, load_config

__all__ = [
    "Glm5Config",
    "QuantProfile",
    "build_attention",
    "build_layer",
    "default_config_dir",
    "load_config",
]


def __getattr__(name: str):
    if name in ("build_layer", "build_attention", "SPLIT_OPS"):
        from graphbreak_doctor.targets.models.glm5 import builder

        return getattr(builder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

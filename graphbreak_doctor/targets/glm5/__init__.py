"""GLM-5-NVFP4 decoder layers (``GlmMoeDsaForCausalLM``) as targets.

The provider (provider.py, ``--layer``) and the config reader (config.py)
import no torch; the builder (builder.py) does, and is loaded on first use of
``build_layer`` / ``build_attention``.
"""

from __future__ import annotations

from graphbreak_doctor.targets.glm5.config import Glm5Config, QuantProfile, default_config_dir, load_config

__all__ = [
    "Glm5Config",
    "QuantProfile",
    "build_attention",
    "build_layer",
    "default_config_dir",
    "load_config",
]


def __getattr__(name: str):
    if name in ("build_layer", "build_attention", "SPLIT_OPS", "MODEL"):
        from graphbreak_doctor.targets.glm5 import builder

        return getattr(builder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

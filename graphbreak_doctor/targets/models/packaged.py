"""The models whose config folders ship with graphbreak-doctor, by name
(``--model-path NAME``).

A packaged model is a ``PackagedModel`` record in its package
(``targets/models/<model>/__init__.py``: ``MODEL``) plus one line in
``_PACKAGES`` here; an installed package adds one through the entry-point
group ``graphbreak_doctor.models`` (plugins.py)."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path

from graphbreak_doctor import plugins


@dataclass(frozen=True)
class PackagedModel:
    name: str  # what --model-path takes, e.g. "deepseek-v3"
    title: str  # e.g. "DeepSeek-V3 (FP8 block-scaled)"
    config_dir: Path  # config.json, and hf_quant_config.json where the checkpoint has one


_PACKAGES = (
    "graphbreak_doctor.targets.models.glm5",
    "graphbreak_doctor.targets.models.deepseek_v3",
    "graphbreak_doctor.targets.models.qwen3_moe",
)


@functools.cache
def packaged() -> tuple[PackagedModel, ...]:
    """The built-in models (the default, GLM-5-NVFP4, first), then the plugins'."""
    built_in = tuple(importlib.import_module(name).MODEL for name in _PACKAGES)
    return built_in + plugins.load("models", PackagedModel, {m.name for m in built_in})


def config_dir(name: str) -> Path | None:
    """The config folder of the packaged model ``name``, or None."""
    return next((m.config_dir for m in packaged() if m.name == name), None)


__all__ = ["PackagedModel", "config_dir", "packaged"]

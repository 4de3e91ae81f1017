"""The models whose config folders ship with graphbreak-doctor, by name
(``--model-path NAME``).

A packaged model is a package ``targets/models/<model>/`` that declares
itself in a data file beside its config folder; there is no list to edit::

    targets/models/<model>/__init__.py      a docstring, and the model's own code where it has any
    targets/models/<model>/model.json       {"name": "deepseek-v3", "title": "DeepSeek-V3 (FP8 block-scaled)"}
    targets/models/<model>/configs/         config.json, and hf_quant_config.json where the checkpoint has one

``model.json`` holds ``name`` (what ``--model-path`` takes: letters, digits,
``.``, ``_``, ``-``), ``title`` (what a person reads) and, for one model
only, ``"default": true`` (GLM-5-NVFP4: what a served target builds when no
model is named). The packages are found by walking this package's
subpackages (pkgutil) and reading each one's ``model.json`` as data:
nothing of a model package is imported to list the models (listing them
for ``--help`` imports no GLM-5 code). The default comes first, then the
others by package name.

An installed package adds a ``PackagedModel`` through the entry-point group
``graphbreak_doctor.models`` (plugins.py); those come after the built-in
ones."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

from graphbreak_doctor import plugins

# The package whose subpackages are the models, each one's data file, and its config folder.
MODELS_PACKAGE = "graphbreak_doctor.targets.models"
DATA_FILE = "model.json"
CONFIGS = "configs"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_KEYS = {"name": str, "title": str, "default": bool}


@dataclass(frozen=True)
class PackagedModel:
    name: str  # what --model-path takes, e.g. "deepseek-v3"
    title: str  # e.g. "DeepSeek-V3 (FP8 block-scaled)"
    config_dir: Path  # config.json, and hf_quant_config.json where the checkpoint has one


@dataclass(frozen=True)
class _Declared:
    """One model package as its data file declares it."""

    package: str  # the subpackage's name, e.g. "deepseek_v3"
    model: PackagedModel
    default: bool


def _read(package: str, folder: Path) -> _Declared:
    """The model that ``folder``'s data file declares; ValueError (one line,
    naming the file) when the file is not such a declaration."""
    path = folder / DATA_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a model declaration: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a model declaration is a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    for key, kind in _KEYS.items():
        if key == "default" and key not in data:
            continue
        if not isinstance(data.get(key), kind):
            raise ValueError(f"{path}: {key!r} must be a {kind.__name__}, got {data.get(key)!r}")
    if not _NAME.fullmatch(data["name"]):
        raise ValueError(f"{path}: name {data['name']!r} is not a model name (letters, digits, '.', '_', '-')")
    if not data["title"].strip():
        raise ValueError(f"{path}: the title is empty")
    if not (folder / CONFIGS).is_dir():
        raise ValueError(f"{path}: the package holds no {CONFIGS}/ folder beside it")
    model = PackagedModel(data["name"], data["title"], folder.resolve() / CONFIGS)
    return _Declared(package, model, data.get("default", False))


def _declared() -> tuple[_Declared, ...]:
    """Every subpackage of the models package that holds a data file, read
    without importing it: the default first, then by package name."""
    parent = importlib.import_module(MODELS_PACKAGE)
    found = []
    for info in sorted(pkgutil.iter_modules(parent.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        # The spec locates the subpackage's folder; the subpackage itself is not imported.
        spec = importlib.util.find_spec(f"{MODELS_PACKAGE}.{info.name}")
        locations = list(spec.submodule_search_locations or ()) if spec is not None else []
        if locations and (Path(locations[0]) / DATA_FILE).is_file():
            found.append(_read(info.name, Path(locations[0])))
    defaults = [d.package for d in found if d.default]
    if len(defaults) > 1:
        raise ValueError(f"packaged models {', '.join(defaults)} each declare themselves the default: one may")
    names: dict[str, str] = {}
    for d in found:
        if d.model.name in names:
            raise ValueError(f"packaged models {names[d.model.name]} and {d.package} both take the name "
                             f"{d.model.name!r}")
        names[d.model.name] = d.package
    return tuple(sorted(found, key=lambda d: not d.default))


@functools.cache
def packaged() -> tuple[PackagedModel, ...]:
    """The built-in models (the default, GLM-5-NVFP4, first), then the plugins'."""
    built_in = tuple(d.model for d in _declared())
    return built_in + plugins.load("models", PackagedModel, {m.name for m in built_in})


def config_dir(name: str) -> Path | None:
    """The config folder of the packaged model ``name``, or None."""
    return next((m.config_dir for m in packaged() if m.name == name), None)


def listing() -> str:
    """The packaged models' names for help and error texts, in order, the
    default marked: ``glm5-nvfp4 (the default), deepseek-v3, ...``."""
    defaults = {d.model.name for d in _declared() if d.default}
    return ", ".join(f"{m.name} (the default)" if m.name in defaults else m.name for m in packaged())


__all__ = ["CONFIGS", "DATA_FILE", "MODELS_PACKAGE", "PackagedModel", "config_dir", "listing", "packaged"]

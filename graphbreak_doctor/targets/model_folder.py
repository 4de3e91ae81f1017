"""A model's config folder, read as untrusted input before anything is traced.

Any model a serving framework serves comes as a folder holding ``config.json``
(HuggingFace's, keys as ``transformers`` names them) and, for a ModelOpt
checkpoint, ``hf_quant_config.json``. The folder is the user's -- or anyone's:
every way it can be wrong (a FIFO in place of a file, a file of gigabytes,
JSON nested a hundred thousand deep, a number of five thousand digits, a size
of ``10**12`` or ``"4096"``) is a ``ValueError`` with one line naming the file
and the key, never a hang, a RecursionError or an error deep inside a build.

This module is the one place that reads an untrusted config JSON
(:func:`read_json`); a model package (``targets/models/<model>/config.py``)
reads its files through it and adds its own checks. It imports neither torch
nor a framework, nor anything from ``targets/models`` or
``targets/frameworks``: only :mod:`graphbreak_doctor.text` and the stdlib.
What a value *means* is the framework's to decide; here values are checked
only to be of the type and size no model goes past.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphbreak_doctor.text import escape_controls, one_line

CONFIG_NAME = "config.json"
QUANT_CONFIG_NAME = "hf_quant_config.json"

# A config.json is a few KiB, a ModelOpt profile listing every excluded module
# of a large model some hundreds: a file past this is not a config.
MAX_BYTES = 4 << 20
# Configs nest three or four levels (rope_scaling, quantization_config's
# config_groups); no JSON value deeper than this is read.
MAX_DEPTH = 64
# The most digits a JSON integer may have (2**63 has 19): Python refuses to
# convert more than 4300, and a size needs no more than ten.
MAX_DIGITS = 40
# The largest size or count a config may give: tensors past it overflow the
# 32-bit indexing GPU kernels use, and no model comes near it.
MAX_SIZE = 2**31 - 1
# Counts the doctor walks (every layer, every expert): tighter.
MAX_LAYERS = 10_000
MAX_EXPERTS = 2**20
# The most elements one weight a config describes may have: far beyond any
# model (DeepSeek-V3's routed experts are 3.8e9), short of 64-bit byte counts.
MAX_ELEMENTS = 2**48
# Strings inside values the framework reads (quant methods, module patterns).
MAX_STRING = 4096
MAX_ARCHITECTURES = 8
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_QUANT_METHOD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")

# Size fields: (least, most). Checked where present.
SIZES: dict[str, tuple[int, int]] = {
    "hidden_size": (1, MAX_SIZE),
    "intermediate_size": (1, MAX_SIZE),
    "moe_intermediate_size": (1, MAX_SIZE),
    "num_hidden_layers": (1, MAX_LAYERS),
    "num_attention_heads": (1, MAX_SIZE),
    "num_key_value_heads": (1, MAX_SIZE),
    "head_dim": (1, MAX_SIZE),
    "vocab_size": (1, MAX_SIZE),
    "max_position_embeddings": (1, MAX_SIZE),
    "n_routed_experts": (1, MAX_EXPERTS),
    "num_experts": (1, MAX_EXPERTS),
    "num_experts_per_tok": (1, MAX_EXPERTS),
    "n_shared_experts": (0, MAX_EXPERTS),
    "first_k_dense_replace": (0, MAX_LAYERS),
    "moe_layer_freq": (1, MAX_LAYERS),
    "decoder_sparse_step": (1, MAX_LAYERS),
    "kv_lora_rank": (1, MAX_SIZE),
    "q_lora_rank": (1, MAX_SIZE),
    "qk_nope_head_dim": (1, MAX_SIZE),
    "qk_rope_head_dim": (1, MAX_SIZE),
    "v_head_dim": (1, MAX_SIZE),
    "n_group": (1, MAX_EXPERTS),
    "topk_group": (1, MAX_EXPERTS),
}
# May be null: transformers' own default for them is None (DeepseekV2Config:
# q_lora_rank, n_routed_experts, n_group...; MistralConfig: head_dim).
NULLABLE = frozenset({"q_lora_rank", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
                      "head_dim", "num_key_value_heads", "n_group", "topk_group"})
# Said "an integer from L to M" rather than "a positive integer up to M":
# the words GLM-5's reader has always used for them (tests check them).
_FROM_TO = frozenset({"vocab_size", "num_key_value_heads", "first_k_dense_replace", "moe_layer_freq"})
# Real numbers: finite where present.
REALS = ("rms_norm_eps", "rope_theta", "routed_scaling_factor")
# Nested objects frameworks read: objects (or null) where present; their
# values stay as they are but must be plain JSON of sane size.
OBJECTS = ("rope_scaling", "rope_parameters", "quantization_config", "compression_config", "text_config")
# Weights whose element count is a product of config values.
_PRODUCTS = (
    ("vocab_size", "hidden_size"),
    ("intermediate_size", "hidden_size"),
    ("n_routed_experts", "moe_intermediate_size", "hidden_size"),
    ("num_experts", "moe_intermediate_size", "hidden_size"),
)


@dataclass(frozen=True)
class ModelFolder:
    path: str  # the folder (absolute)
    config: dict  # config.json, checked
    architectures: tuple[str, ...]
    # config.json's "quantization_config", else hf_quant_config.json's content, else None
    quantization: dict | None
    quant_file: str | None  # the file the quantization came from


def _error(text: str) -> ValueError:
    """A ValueError whose message is one line, whatever a path or value holds."""
    return ValueError(one_line(escape_controls(text), limit=1000))


def _shown(value: Any) -> str:
    """A value as a message shows it: repr, cut short (a list of a million)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int past Python's digit limit cannot be repr'd
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(mode: int) -> str:
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a file")


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"a number of {len(digits.lstrip('-'))} digits")
    return int(digits)


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (a scalar 0, ``[]`` 1), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if deepest > MAX_DEPTH:
                break
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_json(path: str | os.PathLike, what: str = "config", max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The JSON object an untrusted file holds; a ValueError with a one-line
    message (``{what} {path} ...``) when it is missing, not a regular file (a
    FIFO is refused before it is opened, so it never blocks; a symlink to a
    file is read), larger than ``max_bytes``, not UTF-8, not JSON, not an
    object, nested deeper than MAX_DEPTH or holding an integer of more than
    MAX_DIGITS digits."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError) as exc:  # missing, a symlink loop, EACCES, a NUL byte in the name
        raise _error(f"cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISREG(mode):
        raise _error(f"{what} {path} is {_kind(mode)}, not a regular file")
    try:
        # O_NONBLOCK: should the file be swapped for a FIFO since the stat,
        # opening it does not wait for a writer; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise _error(f"{what} {path} is {_kind(mode)}, not a regular file")
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise _error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise _error(f"{what} {path} is larger than {max_bytes >> 20} MiB: not a config")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _error(f"{what} {path} is not UTF-8 text") from None
    try:
        value = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise _error(f"{what} {path} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise _error(f"{what} {path} is JSON nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # a number Python will not convert (thousands of digits)
        raise _error(f"{what} {path} holds JSON that cannot be read: {str(exc).split(';')[0]}") from None
    if not isinstance(value, dict):
        raise _error(f"{what} {path} must hold a JSON object, not {type(value).__name__}")
    if _depth(value) > MAX_DEPTH:
        raise _error(f"{what} {path} is JSON nested too deeply (more than {MAX_DEPTH} levels)")
    return value


def check_plain(value: Any, file: str, key: str = "") -> None:
    """``value`` is plain JSON of sane size: objects, lists, strings of at
    most MAX_STRING characters, 64-bit integers, finite numbers, booleans,
    null. ``file`` and ``key`` (dotted, ``quantization_config.ignore[3]``)
    name where in the error."""
    def at(path: str) -> str:
        return f"{file}: {path!r}" if path else file

    stack = [(value, key)]
    while stack:
        item, path = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not -(2**63) <= item < 2**63:
                raise _error(f"{at(path)} must be a 64-bit integer, got {_shown(item)}")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise _error(f"{at(path)} must be a finite number, got {item!r}")
        elif isinstance(item, str):
            if len(item) > MAX_STRING:
                raise _error(f"{at(path)} is a string of {len(item)} characters, more than {MAX_STRING}")
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str) or len(k) > MAX_STRING:
                    raise _error(f"{at(path)} has a key of more than {MAX_STRING} characters")
                name = k if len(k) <= 64 else k[:61] + "..."
                stack.append((v, f"{path}.{name}" if path else name))
        else:
            raise _error(f"{at(path)} must be JSON data, got {type(item).__name__}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_sizes(file: str, values: dict[str, Any], prefix: str = "") -> None:
    """The size fields (SIZES), real numbers (REALS) and nested objects
    (OBJECTS) of one config level, where present."""
    def key_of(key: str) -> str:
        return repr(prefix + key)

    for key, (least, most) in SIZES.items():
        if key not in values or (values[key] is None and key in NULLABLE):
            continue
        value = values[key]
        if not _is_int(value) or not least <= value <= most:
            expected = (f"a positive integer up to {most}" if least == 1 and key not in _FROM_TO
                        else f"an integer from {least} to {most}")
            raise _error(f"{file}: {key_of(key)} must be {expected}, got {_shown(value)}")
    per_tok = values.get("num_experts_per_tok")
    for experts in ("n_routed_experts", "num_experts"):
        count = values.get(experts)
        if _is_int(per_tok) and _is_int(count) and per_tok > count:
            raise _error(f"{file}: {key_of('num_experts_per_tok')} ({per_tok}) must be at most "
                         f"{key_of(experts)} ({count})")
    for key in REALS:
        if key in values:
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise _error(f"{file}: {key_of(key)} must be a finite number, got {_shown(value)}")
    layers = values.get("mlp_only_layers")
    if "mlp_only_layers" in values and not (isinstance(layers, list) and len(layers) <= MAX_LAYERS and all(
            _is_int(i) and 0 <= i < MAX_LAYERS for i in layers)):
        raise _error(f"{file}: {key_of('mlp_only_layers')} must be a list of layer indices, got {_shown(layers)}")
    for keys in _PRODUCTS:
        factors = [values.get(k) for k in keys]
        if all(_is_int(f) for f in factors) and math.prod(factors) > MAX_ELEMENTS:
            shown = " x ".join(f"{prefix}{k}={v}" for k, v in zip(keys, factors))
            raise _error(f"{file}: {shown} is {math.prod(factors):.3g} elements in one weight, more than "
                         f"{MAX_ELEMENTS:.3g}: not a model the doctor can build")
    for key in OBJECTS:
        value = values.get(key)
        if value is not None and not isinstance(value, dict):
            raise _error(f"{file}: {key_of(key)} must be an object, got {_shown(value)}")


def check_architectures(file: str, values: dict[str, Any]) -> tuple[str, ...]:
    archs = values.get("architectures")
    if archs is None or archs == []:
        state = "missing" if "architectures" not in values else "null" if archs is None else "empty"
        raise _error(f"{file}: 'architectures' must name the model class (e.g. [\"Qwen3MoeForCausalLM\"]); "
                     f"it is {state}")
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise _error(f"{file}: 'architectures' must be a list of strings, got {_shown(archs)}")
    if len(archs) > MAX_ARCHITECTURES:
        raise _error(f"{file}: 'architectures' names {len(archs)} classes, more than {MAX_ARCHITECTURES}")
    for name in archs:
        if not _IDENTIFIER.fullmatch(name):
            raise _error(f"{file}: 'architectures' must hold class names (letters, digits, _), got {_shown(name)}")
    return tuple(archs)


def _check_config(file: str, values: dict[str, Any]) -> tuple[str, ...]:
    archs = check_architectures(file, values)
    if not isinstance(values.get("model_type", ""), str) or len(values.get("model_type", "")) > 128:
        raise _error(f"{file}: 'model_type' must be a string, got {_shown(values['model_type'])}")
    check_sizes(file, values)
    text = values.get("text_config")
    if isinstance(text, dict):  # a multimodal model: the language model's sizes
        check_sizes(file, text, prefix="text_config.")
    for key in OBJECTS:
        if isinstance(values.get(key), dict):
            check_plain(values[key], file, key)
    return archs


def _quantization(folder: str, config_file: str, values: dict[str, Any]) -> tuple[dict | None, str | None]:
    """The quantization as SGLang finds it (``ModelConfig._parse_quant_hf_config``):
    config.json's ``quantization_config``, else ModelOpt's hf_quant_config.json."""
    quant = values.get("quantization_config")
    if quant is not None:
        method = quant.get("quant_method")
        if not isinstance(method, str) or not _QUANT_METHOD.fullmatch(method):
            raise _error(f"{config_file}: 'quantization_config.quant_method' must be a quantization method's "
                         f"name (e.g. \"fp8\"), got {_shown(method)}")
        return quant, config_file
    quant_file = os.path.join(folder, QUANT_CONFIG_NAME)
    if not os.path.exists(quant_file):  # os.path.exists, as SGLang: a broken symlink is no file
        return None, None
    quant = read_json(quant_file, "quantization profile")
    section = quant.get("quantization")
    if not isinstance(section, dict):
        raise _error(f"{quant_file}: 'quantization' must be an object (ModelOpt's "
                     f"{{\"quantization\": {{\"quant_algo\": ...}}}}), got {_shown(section)}")
    for key in ("quant_algo", "kv_cache_quant_algo"):
        if not isinstance(section.get(key), (str, type(None))):
            raise _error(f"quantization profile {quant_file}: {key} must be a string, got {_shown(section[key])}")
    check_plain(quant, quant_file)
    return quant, quant_file


def read_model_folder(path: str | os.PathLike) -> ModelFolder:
    """A model's config folder (or the config.json inside one), checked.

    ValueError with a one-line message naming the file and the key on
    anything bad: see the module's docstring and :func:`read_json`."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise _error(f"no model folder or {CONFIG_NAME} at {path}") from None
    except (OSError, ValueError) as exc:
        raise _error(f"cannot read model folder {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(mode):
        folder = os.path.abspath(path)
        config_file = os.path.join(folder, CONFIG_NAME)
        if not os.path.lexists(config_file):
            raise _error(f"model folder {folder} holds no {CONFIG_NAME}")
    else:
        config_file = os.path.abspath(path)
        folder = os.path.dirname(config_file)
    values = read_json(config_file, "config")
    archs = _check_config(config_file, values)
    quantization, quant_file = _quantization(folder, config_file, values)
    return ModelFolder(path=str(Path(folder)), config=values, architectures=archs,
                       quantization=quantization, quant_file=quant_file)

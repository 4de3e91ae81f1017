"""GLM-5 model configuration and NVFP4 quantization profile, read from files.

The key names are those of HuggingFace transformers'
``models/glm_moe_dsa/configuration_glm_moe_dsa.py`` (``GlmMoeDsaConfig``) plus
the DeepSeek-V2 keys SGLang's ``DeepseekV2ForCausalLM`` reads
(``first_k_dense_replace``, ``moe_layer_freq``, ``scoring_func``...). The
quantization profile is ModelOpt's ``hf_quant_config.json`` (nested
``{"quantization": {...}}``) or the flat ``quantization_config`` block of
``config.json``, the two formats SGLang's ``ModelOptFp4Config.from_config``
(``layers/quantization/modelopt_quant.py``) accepts.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The one reader of an untrusted config JSON (size, FIFO, depth, digits); the
# checks below are GLM-5's own.
from graphbreak_doctor.targets.model_folder import MAX_SIZE as _MAX_SIZE, QUANT_CONFIG_NAME, read_json

ARCHITECTURE = "GlmMoeDsaForCausalLM"

# Keys the layer builder cannot do without; a config missing one is not a
# GLM-5 (GlmMoeDsa) config.
_REQUIRED = (
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "n_group",
    "topk_group",
    "routed_scaling_factor",
    "rms_norm_eps",
    "max_position_embeddings",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
)


def default_config_dir() -> Path:
    """The GLM-5-NVFP4 config shipped with the package (``configs/``: the
    model's config.json and ModelOpt NVFP4 profiles)."""
    return Path(__file__).resolve().parent / "configs"


@dataclass(frozen=True)
class QuantProfile:
    """Which linear layers are NVFP4, as a ModelOpt profile says."""

    quant_algo: str | None
    group_size: int
    exclude_modules: tuple[str, ...]
    path: str | None

    def is_nvfp4(self, prefix: str) -> bool:
        """True when the module at ``prefix`` (HF name, e.g.
        ``model.layers.3.mlp.experts``) is NVFP4 in the checkpoint.

        Glob matching on the full name and on each dotted part, as SGLang's
        ``ModelOptQuantConfig.is_layer_excluded`` does (fnmatch here, its
        regex there).
        """
        if not self.quant_algo or "FP4" not in self.quant_algo.upper():
            return False
        for pattern in self.exclude_modules:
            if fnmatch.fnmatchcase(prefix, pattern):
                return False
            if any(fnmatch.fnmatchcase(part, pattern) for part in prefix.split(".")):
                return False
        return True



@dataclass(frozen=True)
class Glm5Config:
    values: dict[str, Any]
    path: str
    quant: QuantProfile
    extra: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        # Attribute access for config keys (cfg.hidden_size), like a HF config.
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def first_k_dense_replace(self) -> int:
        return int(self.values.get("first_k_dense_replace", 3))

    @property
    def moe_layer_freq(self) -> int:
        return int(self.values.get("moe_layer_freq", 1))

    def layer_kind(self, index: int) -> str:
        """'dense' or 'moe' for decoder layer ``index``, with SGLang's rule
        (``deepseek_v2.py``: ``_is_layer_sparse``)."""
        if not 0 <= index < self.num_hidden_layers:
            raise ValueError(
                f"layer index {index} out of range 0..{self.num_hidden_layers - 1}"
            )
        sparse = (
            self.n_routed_experts is not None
            and index >= self.first_k_dense_replace
            and index % self.moe_layer_freq == 0
        )
        return "moe" if sparse else "dense"

    def layer_indices(self, kind: str) -> list[int]:
        return [i for i in range(self.num_hidden_layers) if self.layer_kind(i) == kind]

    @property
    def rope_theta(self) -> float:
        rope = self.values.get("rope_parameters") or {}
        return float(rope.get("rope_theta", self.values.get("rope_theta", 10000.0)))


def _quant_profile(config_dir: Path, values: dict[str, Any], quant_profile: str | Path | None) -> QuantProfile:
    if quant_profile is not None:
        qpath = Path(quant_profile)
        if not qpath.is_absolute() and not qpath.exists():
            qpath = config_dir / qpath
        data = read_json(qpath, "quantization profile")
        source: str | None = str(qpath)
    elif (config_dir / QUANT_CONFIG_NAME).exists():
        qpath = config_dir / QUANT_CONFIG_NAME
        data = read_json(qpath, "quantization profile")
        source = str(qpath)
    elif isinstance(values.get("quantization_config"), dict):
        data = values["quantization_config"]
        source = "config.json:quantization_config"
    else:
        # An unquantized checkpoint: everything BF16.
        return QuantProfile(None, 16, (), None)

    # Nested (hf_quant_config.json) or flat (config.json) format; the flat one
    # names the exclusions "ignore" (modelopt_quant.py: ModelOptFp4Config.from_config).
    section = data.get("quantization", data)
    if not isinstance(section, dict):
        raise ValueError(f"quantization profile {source}: 'quantization' must be an object")
    algo = section.get("quant_algo")
    excludes = section.get("exclude_modules", section.get("ignore")) or []
    group = section.get("group_size", 16)
    if algo is None:
        raise ValueError(f"quantization profile {source} has no quant_algo")
    if not isinstance(algo, str):
        raise ValueError(f"quantization profile {source}: quant_algo must be a string, got {algo!r}"[:300])
    if not isinstance(excludes, list) or not all(isinstance(e, str) for e in excludes):
        raise ValueError(f"quantization profile {source}: exclude_modules must be a list of strings")
    if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group <= _MAX_SIZE:
        raise ValueError(f"quantization profile {source}: group_size must be a positive integer, got {group!r}"[:300])
    if algo.upper() == "NVFP4" and group != 16:
        raise ValueError(f"quantization profile {source}: NVFP4 needs group_size 16, got {group}")
    return QuantProfile(str(algo), int(group), tuple(excludes), source)


# Tighter limits where a value is a count the doctor walks (every layer's kind).
_MAX = {"num_hidden_layers": 10_000}
# Keys whose values are real numbers (the rest of _REQUIRED are sizes and counts).
_REAL = ("routed_scaling_factor", "rms_norm_eps")
# Optional keys read as integers, with their least value.
_OPTIONAL_INTS = {"first_k_dense_replace": 0, "moe_layer_freq": 1, "vocab_size": 1, "num_key_value_heads": 1}
# May be null: a model without routed experts (every layer dense).
_NULLABLE = ("n_routed_experts",)


def _check_values(config_file: Path, values: dict[str, Any]) -> None:
    """Every size a positive integer, every real a positive number: a config
    that says ``"hidden_size": "big"`` or ``-6144`` is bad input (exit 2), not
    an error deep inside the layer build."""
    def bad(key: str, expected: str) -> ValueError:
        return ValueError(f"{config_file}: {key!r} must be {expected}, got {values[key]!r}"[:300])

    for key in _REQUIRED:
        value = values[key]
        if key in _NULLABLE and value is None:
            continue
        if key in _REAL:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
                raise bad(key, "a positive number")
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX.get(key, _MAX_SIZE):
            raise bad(key, f"a positive integer up to {_MAX.get(key, _MAX_SIZE)}")
    rope = values.get("rope_parameters")
    if rope is not None and not isinstance(rope, dict):
        raise bad("rope_parameters", "an object")
    for where, holder in (("rope_theta", values), ("rope_parameters.rope_theta", rope or {})):
        theta = holder.get("rope_theta")
        if theta is not None and (isinstance(theta, bool) or not isinstance(theta, (int, float))
                                  or not 0 < theta < float("inf")):
            raise ValueError(f"{config_file}: {where!r} must be a positive number, got {theta!r}"[:300])
    for key, least in _OPTIONAL_INTS.items():
        if key in values and (isinstance(values[key], bool) or not isinstance(values[key], int)
                              or not least <= values[key] <= _MAX_SIZE):
            raise bad(key, f"an integer from {least} to {_MAX_SIZE}")


# The weights whose element count is a product of config values, and the
# most elements one may have: far beyond any model (GLM-5's routed experts'
# gate and up projections are 6.4e9), still short of the 64-bit byte counts
# a tensor's storage is sized in.
_PRODUCTS = (
    ("n_routed_experts", "moe_intermediate_size", "hidden_size"),
    ("intermediate_size", "hidden_size"),
    ("vocab_size", "hidden_size"),
    ("num_attention_heads", "qk_nope_head_dim", "kv_lora_rank"),
    ("num_attention_heads", "qk_rope_head_dim", "q_lora_rank"),
    ("index_n_heads", "index_head_dim", "q_lora_rank"),
)
_MAX_ELEMENTS = 2**48


def _check_products(config_file: Path, values: dict[str, Any]) -> None:
    """No weight the config describes is too large to be a tensor: exit 2
    naming the fields, not a storage overflow inside the trace."""
    for keys in _PRODUCTS:
        factors = [values.get(k) for k in keys]
        if not all(isinstance(f, int) and not isinstance(f, bool) for f in factors):
            continue  # a nullable or absent key: no such weight
        product = 1
        for f in factors:
            product *= f
        if product > _MAX_ELEMENTS:
            shown = " x ".join(f"{k}={v}" for k, v in zip(keys, factors))
            raise ValueError(f"{config_file}: {shown} is {product:.3g} elements in one weight, more than "
                             f"{_MAX_ELEMENTS:.3g}: not a model the doctor can build")


def check_tp(cfg: Glm5Config, tp: int) -> None:
    """``tp`` shards every split dimension evenly (kernels need shards of
    whole 32-column NVFP4 blocks); a ValueError saying which one it does not."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    for name, size, unit in (
        ("num_attention_heads", cfg.num_attention_heads, 1),
        ("intermediate_size", cfg.intermediate_size, 32),
        ("moe_intermediate_size", cfg.moe_intermediate_size, 32),
    ):
        if size % (tp * unit):
            shards = "" if unit == 1 else f" into shards that are multiples of {unit}"
            raise ValueError(f"--tp {tp} does not divide {name}={size} evenly{shards}")


def load_config(path: str | Path | None = None, *, quant_profile: str | Path | None = None) -> Glm5Config:
    """Read a GLM-5 config.

    ``path``: a directory holding ``config.json`` (and optionally
    ``hf_quant_config.json``), or the ``config.json`` itself; default
    the shipped config (``default_config_dir()``). ``quant_profile``: another profile file (absolute,
    or relative to the config directory), e.g.
    ``hf_quant_config.routed-experts-only.json``.

    Errors (missing file, bad JSON, another architecture, missing keys) raise
    ``ValueError`` with a one-line message.
    """
    p = Path(path) if path is not None else default_config_dir()
    if p.is_dir():
        config_file = p / "config.json"
    else:
        config_file = p
    if not config_file.exists():
        raise ValueError(f"no GLM-5 config at {p} (expected a directory with config.json, or the file)")
    values = read_json(config_file, "config")
    archs = values.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ValueError(f"{config_file}: 'architectures' must be a list of strings, got {archs!r}"[:300])
    if not isinstance(values.get("model_type", ""), str):
        raise ValueError(f"{config_file}: 'model_type' must be a string, got {values['model_type']!r}"[:300])
    if ARCHITECTURE not in archs and values.get("model_type") != "glm_moe_dsa":
        raise ValueError(
            f"{config_file} is not a {ARCHITECTURE} config (architectures={archs}, "
            f"model_type={values.get('model_type')!r})"
        )
    missing = [k for k in _REQUIRED if k not in values]
    if missing:
        raise ValueError(f"{config_file} lacks keys: {', '.join(missing)}")
    _check_values(config_file, values)
    _check_products(config_file, values)
    quant = _quant_profile(config_file.parent, values, quant_profile)
    return Glm5Config(values=values, path=str(config_file.resolve()), quant=quant)

"""A model's config folder is untrusted input: the real shapes SGLang serves
(GLM-5 NVFP4, DeepSeek-V3 FP8, Qwen3-MoE BF16) read; anything hostile is a
ValueError of one line naming the file and the key -- never a hang, a
RecursionError, or another exception."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from graphbreak_doctor.targets import model_folder
from graphbreak_doctor.targets.model_folder import ModelFolder, read_model_folder

GLM5 = ROOT / "graphbreak_doctor" / "targets" / "models" / "glm5" / "configs"

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekV3Config",
        "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
    "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8,
    "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3,
    "norm_topk_prob": True, "scoring_func": "sigmoid", "aux_loss_alpha": 0.001, "seq_aux": True,
    "hidden_act": "silu", "max_position_embeddings": 163840, "initializer_range": 0.02, "rms_norm_eps": 1e-06,
    "use_cache": True, "pretraining_tp": 1, "tie_word_embeddings": False, "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
    "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "vocab_size": 129280, "ep_size": 1,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
}

QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": False,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}


def _folder(tmp_path: Path, config: dict | str | bytes, quant: dict | None = None) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    data = config if isinstance(config, (str, bytes)) else json.dumps(config)
    (folder / "config.json").write_bytes(data.encode() if isinstance(data, str) else data)
    if quant is not None:
        (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    return folder


def _refused(path, *said: str) -> str:
    with pytest.raises(ValueError) as info:
        read_model_folder(path)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message and len(message) <= 1100, message
    for part in said:
        assert part in message, message
    return message


# ------------------------------------------------------------ real shapes


def test_the_packaged_glm5_folder_reads_with_its_modelopt_profile():
    folder = read_model_folder(GLM5)
    assert isinstance(folder, ModelFolder)
    assert folder.path == str(GLM5) and os.path.isabs(folder.path)
    assert folder.architectures == ("GlmMoeDsaForCausalLM",)
    assert folder.config["hidden_size"] == 6144
    assert folder.quantization["quantization"]["quant_algo"] == "NVFP4"
    assert folder.quant_file == str(GLM5 / "hf_quant_config.json")
    # The config.json itself names the same folder.
    assert read_model_folder(GLM5 / "config.json") == folder


def test_a_deepseek_v3_fp8_config_reads_with_its_quantization_config(tmp_path):
    folder = read_model_folder(_folder(tmp_path, DEEPSEEK_V3))
    assert folder.architectures == ("DeepseekV3ForCausalLM",)
    assert folder.quantization == {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                   "weight_block_size": [128, 128]}
    assert folder.quant_file == str(tmp_path / "model" / "config.json")


def test_quantization_config_wins_over_hf_quant_config_json(tmp_path):
    folder = read_model_folder(_folder(tmp_path, DEEPSEEK_V3, quant={"quantization": {"quant_algo": "NVFP4"}}))
    assert folder.quantization["quant_method"] == "fp8"


def test_a_qwen3_moe_bf16_config_reads_unquantized(tmp_path):
    folder = read_model_folder(_folder(tmp_path, QWEN3_30B_A3B))
    assert folder.architectures == ("Qwen3MoeForCausalLM",)
    assert folder.quantization is None and folder.quant_file is None
    assert folder.config["mlp_only_layers"] == [] and folder.config["num_experts"] == 128


def test_a_symlinked_config_json_reads(tmp_path):
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps(QWEN3_30B_A3B))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").symlink_to(real)
    assert read_model_folder(tmp_path / "model").architectures == ("Qwen3MoeForCausalLM",)


# ------------------------------------------------------------ hostile folders


HOSTILE = [
    ("junk", b"}{ not json at all", ["config.json", "is not valid JSON"]),
    ("array", b"[1, 2]", ["config.json", "must hold a JSON object"]),
    ("negative", {**QWEN3_30B_A3B, "hidden_size": -4096}, ["'hidden_size' must be a positive integer", "-4096"]),
    ("experts", {**DEEPSEEK_V3, "n_routed_experts": 10**12}, ["'n_routed_experts' must be a positive integer up to"]),
    ("string-size", {**QWEN3_30B_A3B, "hidden_size": "4096"}, ["'hidden_size'", "got '4096'"]),
    ("bool-size", {**QWEN3_30B_A3B, "num_experts": True}, ["'num_experts'", "got True"]),
    ("float-size", {**QWEN3_30B_A3B, "vocab_size": 151936.0}, ["'vocab_size'"]),
    ("layers", {**QWEN3_30B_A3B, "num_hidden_layers": 10**6}, ["'num_hidden_layers'", "up to 10000"]),
    ("per-tok", {**QWEN3_30B_A3B, "num_experts_per_tok": 129}, ["'num_experts_per_tok' (129)", "'num_experts'"]),
    ("eps", b'{"architectures": ["A"], "rms_norm_eps": NaN}', ["'rms_norm_eps' must be a finite number"]),
    ("rope", {**QWEN3_30B_A3B, "rope_scaling": "yarn"}, ["'rope_scaling' must be an object"]),
    ("quant", {**QWEN3_30B_A3B, "quantization_config": ["fp8"]}, ["'quantization_config' must be an object"]),
    ("method", {**QWEN3_30B_A3B, "quantization_config": {"bits": 4}}, ["'quantization_config.quant_method'"]),
    ("quant-value", {**DEEPSEEK_V3, "quantization_config": {"quant_method": "fp8", "x": "a" * 10_000}},
     ["'quantization_config.x' is a string of 10000 characters"]),
    ("product", {**QWEN3_30B_A3B, "vocab_size": 2**31 - 1, "hidden_size": 2**31 - 1}, ["vocab_size=", "elements"]),
    ("no-arch", {k: v for k, v in QWEN3_30B_A3B.items() if k != "architectures"}, ["'architectures'", "missing"]),
    ("arch-42", {**QWEN3_30B_A3B, "architectures": [42]}, ["'architectures' must be a list of strings, got [42]"]),
    ("arch-empty", {**QWEN3_30B_A3B, "architectures": [""]}, ["'architectures' must hold class names"]),
    ("arch-odd", {**QWEN3_30B_A3B, "architectures": ["Qwen\n\x1b[2J"]}, ["'architectures' must hold class names"]),
    ("arch-many", {**QWEN3_30B_A3B, "architectures": ["A"] * 100}, ["'architectures' names 100 classes"]),
    ("deep", b'{"architectures": ["A"], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     ["config.json", "nested too deeply"]),
    ("deep-70", b'{"architectures": ["A"], "x": ' + b"[" * 70 + b"]" * 70 + b"}", ["nested too deeply"]),
    ("digits", b'{"architectures": ["A"], "hidden_size": 1' + b"0" * 5000 + b"}",
     ["config.json holds JSON that cannot be read", "5001 digits"]),
    ("digits-4000", b'{"architectures": ["A"], "seed": 1' + b"0" * 4000 + b"}", ["4001 digits"]),
    ("big", b'{"architectures": ["A"], "pad": "' + b"x" * (5 << 20) + b'"}', ["config.json is larger than 4 MiB"]),
    ("latin-1", b'{"architectures": ["A"], "name": "caf\xe9"}', ["config.json is not UTF-8 text"]),
]


@pytest.mark.parametrize("config,said", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_a_hostile_config_is_refused_in_one_line(tmp_path, config, said):
    _refused(_folder(tmp_path, config), *said)


def test_unknown_keys_are_the_frameworks_to_judge(tmp_path):
    config = {**QWEN3_30B_A3B, "some_new_field": {"a": [1, None, "x"]}, "rope_scaling": None}
    assert read_model_folder(_folder(tmp_path, config)).config["some_new_field"] == {"a": [1, None, "x"]}


def test_nullable_sizes_may_be_null(tmp_path):
    config = {**DEEPSEEK_V3, "q_lora_rank": None, "n_group": None, "topk_group": None, "head_dim": None}
    assert read_model_folder(_folder(tmp_path, config)).config["q_lora_rank"] is None
    _refused(_folder(tmp_path, {**DEEPSEEK_V3, "hidden_size": None}), "'hidden_size'", "got None")


def test_a_multimodal_text_config_is_checked_too(tmp_path):
    config = {"architectures": ["Qwen3VLMoeForConditionalGeneration"], "text_config": {"hidden_size": -1}}
    _refused(_folder(tmp_path, config), "'text_config.hidden_size' must be a positive integer")


def test_a_missing_folder_or_config_json_is_named(tmp_path):
    _refused(tmp_path / "nowhere", "no model folder or config.json at", "nowhere")
    (tmp_path / "empty").mkdir()
    _refused(tmp_path / "empty", "holds no config.json")
    (tmp_path / "dir" / "config.json").mkdir(parents=True)
    _refused(tmp_path / "dir", "config.json is a folder, not a regular file")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").symlink_to(tmp_path / "gone.json")
    _refused(tmp_path / "broken", "cannot read config", "config.json")


def test_a_path_with_a_newline_stays_one_line(tmp_path):
    folder = tmp_path / "evil\nname\x1b[31m"
    folder.mkdir()
    (folder / "config.json").write_text("nope")
    message = _refused(folder, "is not valid JSON")
    assert "\\n" in message and "\x1b" not in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("where", ["config.json", "hf_quant_config.json", "named"])
def test_a_fifo_is_refused_without_blocking(tmp_path, where):
    folder = tmp_path / "model"
    folder.mkdir()
    if where == "hf_quant_config.json":
        (folder / "config.json").write_text(json.dumps(QWEN3_30B_A3B))
    fifo = folder / ("config.json" if where == "named" else where)
    os.mkfifo(fifo)
    outcome: list[BaseException | object] = []

    def read() -> None:
        try:
            outcome.append(read_model_folder(fifo if where == "named" else folder))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=10)
    if thread.is_alive():  # it opened the FIFO: let it go before failing
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("reading a FIFO blocked")
    assert len(outcome) == 1 and isinstance(outcome[0], ValueError), outcome
    message = str(outcome[0])
    assert "\n" not in message and where.replace("named", "config.json") in message
    assert "a FIFO (named pipe), not a regular file" in message


def test_a_hostile_hf_quant_config_is_refused(tmp_path):
    _refused(_folder(tmp_path, QWEN3_30B_A3B, quant={"producer": {"name": "modelopt"}}),
             "hf_quant_config.json: 'quantization' must be an object")
    _refused(_folder(tmp_path, QWEN3_30B_A3B, quant={"quantization": {"quant_algo": 4}}),
             "hf_quant_config.json: quant_algo must be a string, got 4")
    _refused(_folder(tmp_path, QWEN3_30B_A3B, quant={"quantization": {"quant_algo": "NVFP4", "group_size": 10**30}}),
             "hf_quant_config.json: 'quantization.group_size' must be a 64-bit integer")
    (tmp_path / "model" / "hf_quant_config.json").write_bytes(b"\xff\xfe")
    _refused(tmp_path / "model", "quantization profile", "hf_quant_config.json is not UTF-8 text")


def test_a_glm5_config_reads_its_files_through_the_one_reader(tmp_path):
    """glm5/config.py keeps its own checks but reads JSON here: a FIFO and a
    depth bomb are refused by the same reader."""
    from graphbreak_doctor.targets.models.glm5 import config as glm5

    assert glm5.read_json is model_folder.read_json
    (tmp_path / "config.json").write_bytes(b"[" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        glm5.load_config(tmp_path)


def test_the_module_imports_only_text_and_the_stdlib():
    tree = ast.parse(Path(model_folder.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    ours = {name for name in imported if name.startswith("graphbreak_doctor")}
    assert ours == {"graphbreak_doctor.text"}, ours
    assert not {name.split(".")[0] for name in imported} - set(sys.stdlib_module_names) - {"graphbreak_doctor"}
    code = ("import sys, graphbreak_doctor.targets.model_folder as m; "
            f"m.read_model_folder({str(GLM5)!r}); "
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'sglang')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ------------------------------------------------------------ the property

_KEYS = st.sampled_from(sorted(model_folder.SIZES) + list(model_folder.REALS) + list(model_folder.OBJECTS)
                        + ["architectures", "model_type", "mlp_only_layers", "x"])
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-3, 300), st.floats(), st.text(max_size=8),
              st.sampled_from(["Qwen3MoeForCausalLM", "fp8", "", "\n", "\ud800"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(_KEYS, st.text(max_size=4)), inner, max_size=4)),
    max_leaves=12,
)
_CONFIG = st.dictionaries(st.one_of(_KEYS, st.text(max_size=6)), _JSON, max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=_CONFIG, architectures=st.booleans(), quant=st.one_of(st.none(), _JSON))
def test_any_json_object_reads_or_is_refused_in_one_line(config, architectures, quant):
    if architectures:
        config = {"architectures": ["Qwen3MoeForCausalLM"], **config}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config, ensure_ascii=True))
        if quant is not None:
            (Path(tmp) / "hf_quant_config.json").write_text(json.dumps(quant, ensure_ascii=True))
        try:
            folder = read_model_folder(tmp)
        except ValueError as exc:
            assert "\n" not in str(exc) and "\r" not in str(exc) and str(exc).strip(), repr(exc)
        else:
            assert json.dumps(folder.config) == json.dumps(config)  # values stay as they are
            assert folder.architectures and all(a.isidentifier() for a in folder.architectures)

"""A model config from elsewhere is input: a field of the wrong type, a size
too large to be a tensor, or launch arguments the installed doctor cannot
read give one line naming what is wrong, exit 2, before anything runs --
never an internal error from deep inside the build."""

from __future__ import annotations

import importlib.util
import json

import pytest

from hostile_material import main, one_error_line


def _config_dir(tmp_path, change: dict, quantization: dict | None = None):
    from graphbreak_doctor.targets.models.glm5.config import default_config_dir

    values = json.loads((default_config_dir() / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**values, **change}))
    quant = json.loads((default_config_dir() / "hf_quant_config.json").read_text())
    quant["quantization"].update(quantization or {})
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    return tmp_path


BAD = [
    ({"architectures": 5}, None, "'architectures' must be a list of strings, got 5"),
    ({"model_type": ["glm_moe_dsa"]}, None, "'model_type' must be a string"),
    ({}, {"quant_algo": 4}, "quant_algo must be a string, got 4"),
    ({}, {"quant_algo": "FP8", "group_size": None}, "group_size must be a positive integer, got None"),
    ({}, {"quant_algo": "FP8", "group_size": "x"}, "group_size must be a positive integer, got 'x'"),
    ({"n_routed_experts": 10**12}, None, "'n_routed_experts' must be a positive integer"),
    ({"hidden_size": 2**31}, None, "'hidden_size' must be a positive integer"),
    ({"vocab_size": 10**15}, None, "'vocab_size' must be an integer from 1"),
    ({"n_routed_experts": 2**20, "moe_intermediate_size": 2**20}, None,
     "n_routed_experts=1048576 x moe_intermediate_size=1048576 x hidden_size=6144"),
    ({"num_hidden_layers": 2**31 - 1}, None, "'num_hidden_layers' must be a positive integer up to 10000"),
    ({"rope_parameters": "x"}, None, "'rope_parameters' must be an object, got 'x'"),
    ({"rope_parameters": {"rope_theta": "x"}}, None, "'rope_parameters.rope_theta' must be a positive number"),
    ({"first_k_dense_replace": 78}, None, "the model has no moe layer (num_hidden_layers=78"),
    ({"n_routed_experts": None}, None, "the model has no moe layer"),
]


@pytest.mark.parametrize("change,quantization,said", BAD, ids=[b[2].split()[0].strip("'") + str(i)
                                                                for i, b in enumerate(BAD)])
def test_a_bad_config_field_is_named_with_exit_2(tmp_path, capsys, change, quantization, said):
    folder = _config_dir(tmp_path, change, quantization)
    code, out, err = main(capsys, "trace", "--layer", "all", "--impl", "reference", "--config", folder,
                          "--no-html", "--json", tmp_path / "f.json")
    assert code == 2 and out == "", out + err
    assert said in one_error_line(err)
    assert not (tmp_path / "f.json").exists() and not (tmp_path / "reports").exists()


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_sglang_args_without_sglang_are_refused_even_with_only_a_model_path(tmp_path, capsys):
    from graphbreak_doctor.targets.models.glm5.config import default_config_dir

    code, out, err = main(capsys, "trace", "--layer", "dense", "--sglang-args",
                          f"--model-path {default_config_dir()}", "--json", tmp_path / "f.json")
    assert code == 2 and out == "", out + err
    assert one_error_line(err) == ("graphbreak-doctor: error: --sglang-args needs SGLang installed: "
                                   "SGLang itself reads them")
    assert not (tmp_path / "f.json").exists()


def test_a_config_number_of_thousands_of_digits_is_named_with_its_file(tmp_path, capsys):
    folder = _config_dir(tmp_path, {})
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text.replace('"hidden_size": 6144', '"hidden_size": 6' + "0" * 5000))
    code, out, err = main(capsys, "trace", "--layer", "dense", "--impl", "reference", "--config", folder, "--no-html")
    assert code == 2 and out == "", out + err
    assert f"config {folder / 'config.json'} holds JSON that cannot be read" in one_error_line(err)

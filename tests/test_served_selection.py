"""Which model is served, and what of it is traced: packaged models by name,
any model's config folder (``--model-path``), and what a model other than
GLM-5 can be asked for. Selection only: nothing here is traced."""

from __future__ import annotations

import json
import shutil

import pytest

from hostile_material import main, one_error_line

from graphbreak_doctor.model.matrix import MODEL
from graphbreak_doctor.targets.models.packaged import config_dir, packaged
from graphbreak_doctor.targets.serving import PROVIDER


def _selections(config, scope="model", layer="model"):
    return PROVIDER.served_selections(layer, "sglang", config=config, scope=scope)


def test_the_packaged_models_are_served_by_name_glm5_first():
    names = [m.name for m in packaged()]
    assert names[0] == "glm5-nvfp4" and {"deepseek-v3", "qwen3-30b-a3b"} <= set(names)
    for m in packaged():
        assert (m.config_dir / "config.json").is_file(), m


@pytest.mark.parametrize("name, spec", [("glm5-nvfp4", "glm5-sglang:model:extend"),
                                        ("deepseek-v3", "deepseekv3-sglang:model:extend"),
                                        ("qwen3-30b-a3b", "qwen3moe-sglang:model:extend")])
def test_a_packaged_name_and_its_folder_select_the_same_model(name, spec):
    by_name, by_folder = _selections(name), _selections(str(config_dir(name)))
    assert [s.spec for s in by_name] == [s.spec for s in by_folder] == [spec]
    assert by_name[0].options["compile_map"] is True


def test_a_folder_named_like_a_packaged_model_wins(tmp_path, monkeypatch):
    """A relative path that exists is the user's folder, not the packaged model."""
    shutil.copytree(config_dir("qwen3-30b-a3b"), tmp_path / "deepseek-v3")
    monkeypatch.chdir(tmp_path)
    (selection,) = _selections("deepseek-v3")
    assert selection.spec == "qwen3moe-sglang:model:extend"
    assert selection.options["config"] == str(tmp_path / "deepseek-v3")


def test_another_model_is_traced_as_its_model_forward():
    with pytest.raises(ValueError, match="give --model"):
        _selections("deepseek-v3", scope="block", layer="dense")
    with pytest.raises(ValueError, match="give --model"):
        _selections("qwen3-30b-a3b", scope="layer", layer="moe")


def test_model_path_alone_selects_the_model_forward_and_names_one_model():
    assert PROVIDER.selected({"model_path": "deepseek-v3"})
    with pytest.raises(ValueError, match="give one"):
        PROVIDER.select({"model_path": "deepseek-v3", "config": str(config_dir("glm5-nvfp4"))})
    with pytest.raises(ValueError, match="give one"):
        PROVIDER.select({"model_path": "deepseek-v3", "sglang_args": "--model-path /somewhere"})


def test_the_matrix_maps_another_model(tmp_path):
    from graphbreak_doctor.matrix.run import Plan

    plan = Plan(MODEL, "sglang", "sglang", ("0.5.23",), ("0.7.4",), ("sm100",), "map", config="qwen3-30b-a3b")
    assert [s.spec for s in plan.selections()] == ["qwen3moe-sglang:model:extend"]
    assert [s.spec for s in Plan(MODEL, "sglang", "sglang", ("0.5.23",), ("0.7.4",), ("sm100",), "map").selections()] == \
        ["glm5-sglang:model:extend"]


@pytest.mark.parametrize("config, says", [
    ({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": -4096}, "hidden_size"),
    ({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 10**12}, "num_experts"),
    ({"architectures": [42]}, "architectures"),
    ({"hidden_size": 4096}, "architectures"),
])
@pytest.mark.parametrize("command", ["trace", "check", "fix", "matrix"])
def test_a_bad_config_folder_is_one_line_exit_2_nothing_written(capsys, tmp_path, config, says, command):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    out = tmp_path / "out.json"
    argv = ["--model", "--model-path", str(folder)] if command == "matrix" else ["--model-path", str(folder)]
    code, _out, err = main(capsys, command, *argv, "--json", str(out))
    assert code == 2, err
    assert says in one_error_line(err)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["model"]

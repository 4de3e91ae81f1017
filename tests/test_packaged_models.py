"""The packaged models are found, not listed: each package under
``targets/models/`` declares itself in its ``model.json`` beside its
``configs/`` folder (targets/models/packaged.py), read without importing the
package. A package added there with no other edit is listed in
``--model-path``'s help and served by its name; the help and the error for
an unknown name list every model from the same declarations."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT
from hostile_material import main, one_error_line

import graphbreak_doctor.targets.models as models_package
from graphbreak_doctor.targets.models.packaged import DATA_FILE, config_dir, listing, packaged
from graphbreak_doctor.targets.serving import PROVIDER

MODELS = ROOT / "graphbreak_doctor" / "targets" / "models"
NEW = "tiny-moe-test"


def _model_path_help(capsys, command: str) -> str:
    """``--model-path``'s help text in ``COMMAND --help``, on one line."""
    with pytest.raises(SystemExit) as done:
        main(capsys, command, "--help")
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("  --model-path DIR|NAME")
    # The help runs on the lines indented deeper than an option's own line.
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("   "))
    return " ".join(" ".join(lines[start:end]).split())


def _declarations() -> dict[str, dict]:
    """Each model package's declaration in the source tree, by package name."""
    return {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(MODELS.glob(f"*/{DATA_FILE}"))}


@pytest.fixture
def more_models(tmp_path, monkeypatch):
    """A second folder of the models package (its ``__path__``), as an
    installed copy holding one more model package would be: what is put in
    it is discovered as the built-in packages are."""
    folder = tmp_path / "more_models"
    folder.mkdir()
    monkeypatch.setattr(models_package, "__path__", [*models_package.__path__, str(folder)])
    packaged.cache_clear()
    yield folder
    packaged.cache_clear()


def _add_package(folder: Path, package: str, declaration: dict | str, configs_from: str = "qwen3-30b-a3b") -> Path:
    """A model package as a contributor adds one: a docstring, its
    declaration, a copy of a packaged model's config folder."""
    where = folder / package
    shutil.copytree(config_dir(configs_from), where / "configs")
    (where / "__init__.py").write_text('"""A model package added for a test."""\n', encoding="utf-8")
    text = declaration if isinstance(declaration, str) else json.dumps(declaration)
    (where / DATA_FILE).write_text(text, encoding="utf-8")
    importlib.invalidate_caches()
    packaged.cache_clear()
    return where


def test_every_model_package_declares_itself_and_is_found():
    declared = _declarations()
    # Every folder with a configs/ folder is a model package with a declaration.
    assert {p.parent.name for p in MODELS.glob("*/configs")} == set(declared)
    names = [m.name for m in packaged()]
    assert names[:3] == ["glm5-nvfp4", "deepseek-v3", "qwen3-30b-a3b"]  # the default first, then by package
    assert set(names) >= {d["name"] for d in declared.values()}
    for package, d in declared.items():
        (model,) = [m for m in packaged() if m.name == d["name"]]
        assert model.title == d["title"] and model.config_dir == MODELS / package / "configs"
        assert (model.config_dir / "config.json").is_file()


def test_the_declared_default_is_the_config_a_served_target_builds_by_default():
    from graphbreak_doctor.targets.models.glm5.config import default_config_dir

    defaults = [d["name"] for d in _declarations().values() if d.get("default")]
    assert defaults == [packaged()[0].name] == ["glm5-nvfp4"]
    assert config_dir(defaults[0]) == default_config_dir()
    assert listing().startswith("glm5-nvfp4 (the default), ")


@pytest.mark.parametrize("command", ["trace", "matrix"])
def test_the_help_lists_every_packaged_model(capsys, command):
    text = _model_path_help(capsys, command)
    assert listing() in text
    for d in _declarations().values():
        assert d["name"] in text


def test_a_new_model_package_is_listed_and_served_with_no_other_edit(capsys, more_models):
    configs = _add_package(more_models, "tiny_moe_test", {"name": NEW, "title": "Tiny MoE (a test's package)"})
    assert [m.name for m in packaged()][-1] == NEW
    assert NEW in _model_path_help(capsys, "trace").split("packaged model: ")[1]
    assert NEW in _model_path_help(capsys, "matrix")
    # Served by its name, by each framework, as its folder is.
    (by_name,) = PROVIDER.served_selections("model", "sglang", config=NEW, scope="model")
    assert by_name.options["config"] == str(configs / "configs")
    assert by_name.spec == "qwen3moe-sglang:model:extend"
    assert PROVIDER.model_selection("vllm", NEW, ()).options["config"] == str(configs / "configs")
    # Listed and served from its data: the package itself was never imported.
    assert "graphbreak_doctor.targets.models.tiny_moe_test" not in sys.modules


@pytest.mark.sglang
@pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="SGLang is not installed")
def test_a_new_model_package_is_traced_by_its_name(capsys, more_models, tmp_path):
    """The added package's model is served as SGLang serves it: built by
    SGLang's registry and loader from the package's config folder."""
    where = _add_package(more_models, "tiny_moe_test", {"name": NEW, "title": "Tiny MoE (a test's package)"})
    out = tmp_path / "new-model.json"
    code, _, err = main(capsys, "trace", "--model-path", NEW, "--device", "sm100", "--mode", "map", "--json", out,
                        "--no-html")
    assert code == 0, err[-3000:]
    target = json.loads(out.read_text(encoding="utf-8"))["target"]
    assert target["spec"] == "qwen3moe-sglang:model:extend"
    assert target["facts"]["config"] == str(where / "configs")
    assert target["facts"]["model_class"] == "sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM"


def test_an_unknown_name_is_one_line_naming_the_packaged_models(capsys, more_models):
    _add_package(more_models, "tiny_moe_test", {"name": NEW, "title": "Tiny MoE (a test's package)"})
    code, _, err = main(capsys, "trace", "--model-path", "no-such-model")
    line = one_error_line(err)
    assert code == 2 and "'no-such-model' is neither a model folder nor a packaged model" in line
    assert line.endswith(listing()) and NEW in line


def test_a_package_without_a_declaration_is_not_a_model(more_models):
    helper = more_models / "shared_helpers"
    helper.mkdir()
    (helper / "__init__.py").write_text('"""Code two model packages share."""\n', encoding="utf-8")
    importlib.invalidate_caches()
    assert "shared_helpers" not in {m.config_dir.parent.name for m in packaged()}
    assert len(packaged()) == len(_declarations())


@pytest.mark.parametrize("declaration, error", [
    ("{not json", "not a model declaration"),
    ('["tiny"]', "a model declaration is a JSON object, not list"),
    ({"name": NEW}, "'title' must be a str"),
    ({"name": NEW, "title": "T", "colour": "blue"}, "unknown key 'colour'"),
    ({"name": "tiny/moe", "title": "T"}, "is not a model name"),
    ({"name": NEW, "title": "T", "default": "yes"}, "'default' must be a bool"),
    ({"name": NEW, "title": "T", "default": True}, "each declare themselves the default"),
    ({"name": "deepseek-v3", "title": "T"}, "both take the name 'deepseek-v3'"),
])
def test_a_bad_declaration_is_one_line_naming_it(more_models, declaration, error):
    _add_package(more_models, "tiny_moe_test", declaration)
    with pytest.raises(ValueError, match=error) as caught:
        packaged()
    assert "\n" not in str(caught.value)


def test_listing_the_models_imports_no_model_package():
    """The help and the error for an unknown name read the declarations; no
    model package (GLM-5's code among them) is imported to list them."""
    script = """
import sys
from graphbreak_doctor.cli import main
from graphbreak_doctor.targets.models.packaged import listing, packaged
listing(), packaged()
for argv in (["trace", "--help"], ["matrix", "--help"], ["trace", "--model-path", "no-such-model"]):
    try:
        main(argv)
    except SystemExit:
        pass
print(sorted(m for m in sys.modules if m.startswith("graphbreak_doctor.targets.models.")))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['graphbreak_doctor.targets.models.packaged']"
    assert "graphbreak_doctor.targets.models.glm5" not in done.stdout


def test_a_model_other_than_glm5_is_served_naming_its_framework_and_nothing_of_glm5():
    """Selecting and serving Qwen3-MoE, under SGLang and under vLLM, imports
    nothing of GLM-5's model package, and the findings' provider names the
    framework and the model; GLM-5 itself does import its package (the scan
    sees it)."""
    code = textwrap.dedent("""
        import sys
        from graphbreak_doctor.targets.frameworks import registry
        from graphbreak_doctor.targets.serving import PROVIDER

        def glm5():
            return sorted(m for m in sys.modules if m.startswith("graphbreak_doctor.targets.models.glm5"))

        for config in ("qwen3-30b-a3b", None):
            chosen = [*PROVIDER.served_selections("model", "sglang", config=config, scope="model"),
                      PROVIDER.model_selection("vllm", config, ())]
            print([PROVIDER._served(registry.of(s.options), s.options).provider for s in chosen], glm5())
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    other, glm5 = done.stdout.strip().splitlines()
    assert other == "['sglang/qwen3moe', 'vllm/qwen3moe'] []", other
    assert glm5.startswith("['sglang/glm5', 'vllm/glmmoedsa'] ['graphbreak_doctor.targets.models.glm5"), glm5

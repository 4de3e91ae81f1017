"""The doctor installed from its wheel builds the matrix's environments on its own.

The pinned requirement files the matrix starts from ship in the wheel (package
data) and are read from the installed package, never from a checkout; a
matrix cell's environment installs the running doctor: a checkout editable,
an installed distribution as a wheel rebuilt from its installed files, keyed
by their version and digest. Each test here installs the wheel built from
the package's sources into a folder of its own (``pip install --target``,
which records the files and compiles them as an install into a virtual
environment does) and runs the doctor from there, outside the checkout. The
whole round trip -- a fresh virtual environment, every command, a real
matrix cell -- is the CI stage `make test-wheel` (.ci/wheel-stage.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from graphbreak_doctor.matrix import doctor_source
from graphbreak_doctor.matrix.envs import REQUIREMENTS, uv_binary
from graphbreak_doctor.targets.frameworks.sglang.environment import SGLANG_PROFILES

PACKAGE_REQUIREMENTS = "graphbreak_doctor/matrix/requirements"
# What the probe prints, run by an interpreter whose only doctor is the installed one.
PROBE = """
import json, sys
from pathlib import Path
import graphbreak_doctor
from graphbreak_doctor.matrix import doctor_source, envs
specs = [envs.EnvSpec(flashinfer="0.6.3"), envs.EnvSpec("sglang", "0.5.9", "0.7.4"), envs.EnvSpec("sglang", "0.5.23", "0.7.4")]
wheel = str(doctor_source.running().wheel(Path(sys.argv[1]))) if len(sys.argv) > 1 else ""
print(json.dumps({"doctor": graphbreak_doctor.__file__, "requirements": str(envs.REQUIREMENTS),
                  "files": [s.requirement_files() for s in specs], "keys": [s.key("2.13.0") for s in specs],
                  "identity": envs.running_doctor().identity(), "wheel": wheel}))
"""


def _clean_env(site: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(site)}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of the package's sources as they are (a copy: nothing left
    in the checkout, a build/ folder, can leak into it)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(ROOT / "graphbreak_doctor", source / "graphbreak_doctor",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp / "dist"), str(source)], check=True, capture_output=True, timeout=300,
                   env=_clean_env(tmp))
    (built,) = (tmp / "dist").glob("graphbreak_doctor-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory) -> Path:
    """The wheel installed into a folder of its own (its RECORD lists the
    compiled files and the installer's records, as in a virtual environment)."""
    folder = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder), str(wheel)],
                   check=True, capture_output=True, timeout=300, env=_clean_env(folder))
    return folder


def _probe(site: Path, cwd: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, env=_clean_env(site), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_wheel_ships_every_requirement_file_the_matrix_reads(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = {"ci.txt"} | {name for _first, base, nodeps, _cuda in SGLANG_PROFILES for name in (base, nodeps)}
    assert {f"{PACKAGE_REQUIREMENTS}/{name}" for name in needed} <= names
    # The same files the checkout's Makefile installs (one place: the package's folder).
    assert REQUIREMENTS == ROOT / PACKAGE_REQUIREMENTS
    with zipfile.ZipFile(wheel) as whl:
        for name in needed:
            assert whl.read(f"{PACKAGE_REQUIREMENTS}/{name}") == (REQUIREMENTS / name).read_bytes()


def test_the_wheel_ships_every_model_packages_declaration(wheel, site, tmp_path):
    """Each model package's model.json ships beside its configs/ folder, and
    the installed doctor finds its packaged models from them."""
    models = ROOT / "graphbreak_doctor" / "targets" / "models"
    declared = {p.relative_to(ROOT).as_posix() for p in models.glob("*/model.json")}
    assert declared and declared <= set(zipfile.ZipFile(wheel).namelist())
    probe = ("import json; from graphbreak_doctor.targets.models.packaged import packaged; "
             "print(json.dumps([[m.name, str(m.config_dir)] for m in packaged()]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=_clean_env(site), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = dict(json.loads(done.stdout))
    assert list(found)[0] == "glm5-nvfp4" and len(found) >= len(declared)
    for name, folder in found.items():
        assert Path(folder).resolve().is_relative_to(site.resolve()) and (Path(folder) / "config.json").is_file()


def test_an_installed_doctor_reads_the_requirement_files_from_its_package(site, tmp_path):
    """Run outside the checkout, with no checkout importable: the environment
    specifications come from the installed package's own files."""
    found = _probe(site, tmp_path)
    assert Path(found["doctor"]).resolve() == (site / "graphbreak_doctor" / "__init__.py").resolve()
    assert Path(found["requirements"]).resolve() == (site / PACKAGE_REQUIREMENTS).resolve()
    reference, old, new = found["files"]
    assert "flashinfer-python==0.6.3" in reference["base.txt"].splitlines()
    assert "torch==2.13.0" in reference["base.txt"].splitlines()
    assert "sglang==0.5.9" in old["nodeps.txt"].splitlines() and "sglang==0.5.23" in new["nodeps.txt"].splitlines()
    assert found["identity"] == {"from": "distribution", "version": "0.1.0",
                                 "digest": found["identity"]["digest"]} and found["identity"]["digest"]


def test_a_cells_environment_gets_the_installed_files_as_a_wheel(wheel, site, tmp_path):
    """The wheel rebuilt from the installed distribution's RECORD holds the
    built wheel's files byte for byte (no compiled caches, no installer
    records), and uv -- which builds the cells' environments -- installs it."""
    rebuilt = Path(_probe(site, tmp_path, str(tmp_path))["wheel"])
    assert rebuilt.name == wheel.name
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(rebuilt) as b:
        members = sorted(n for n in a.namelist() if not n.endswith("/RECORD"))
        assert sorted(n for n in b.namelist() if not n.endswith("/RECORD")) == members
        assert all(a.read(n) == b.read(n) for n in members)
    target = tmp_path / "installed"
    done = subprocess.run([uv_binary(), "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                           str(rebuilt)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (target / PACKAGE_REQUIREMENTS / "ci.txt").is_file()


def test_the_environments_key_follows_the_installed_doctors_content_and_version(site, tmp_path):
    before = _probe(site, tmp_path)
    changed = tmp_path / "changed"
    shutil.copytree(site, changed)
    with open(changed / "graphbreak_doctor" / "text.py", "a", encoding="utf-8") as f:
        f.write("# another doctor\n")
    edited = _probe(changed, tmp_path)
    assert edited["identity"]["digest"] != before["identity"]["digest"]
    assert not set(edited["keys"]) & set(before["keys"])
    (metadata,) = changed.glob("graphbreak_doctor-*.dist-info/METADATA")
    text = (changed / "graphbreak_doctor" / "text.py").read_text(encoding="utf-8").replace("# another doctor\n", "")
    (changed / "graphbreak_doctor" / "text.py").write_text(text, encoding="utf-8")
    metadata.write_text(metadata.read_text(encoding="utf-8").replace("Version: 0.1.0", "Version: 0.1.1"),
                        encoding="utf-8")
    bumped = _probe(changed, tmp_path)
    assert bumped["identity"]["version"] == "0.1.1"
    assert not set(bumped["keys"]) & set(before["keys"])


def test_a_checkout_installs_itself_editable():
    """Run from this checkout (its editable install), the cells' environments
    install the checkout itself, as before."""
    source = doctor_source.running()
    assert source.identity() == {"from": "checkout", "path": str(ROOT)}
    assert source.install_args(ROOT) == ["-e", str(ROOT)]


def test_an_installed_doctor_missing_a_file_is_one_line_exit_2(site, tmp_path):
    """A broken install (a file its RECORD lists is gone): the matrix says so
    in one line, exit 2, before any environment is built, and writes nothing."""
    broken = tmp_path / "broken"
    shutil.copytree(site, broken)
    (top_level,) = broken.glob("graphbreak_doctor-*.dist-info/top_level.txt")
    top_level.unlink()
    (tmp_path / "mine.py").write_text("import torch\n\ndef target():\n    return torch.sin, (torch.ones(2),)\n")
    done = subprocess.run([sys.executable, "-m", "graphbreak_doctor", "matrix", "--target", "mine:target",
                           "--envs", str(tmp_path / "envs"), "--json", "m.json", "--no-html"], cwd=tmp_path,
                          env=_clean_env(broken), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "top_level.txt" in done.stderr and "reinstall graphbreak-doctor" in done.stderr
    assert not (tmp_path / "m.json").exists()
    assert not [p for p in (tmp_path / "envs").glob("*") if not p.name.startswith(".")]

"""torch as an axis: `matrix --torch V1,V2` gives each cell an environment
holding that torch and says which torch ran; `trace --torch VERSION` traces
in such an environment.

CI runs the path of the torch the test environment holds (2.13.0, a CPU
build): its environment is the one every other reference cell uses. The
other release here, 2.14.1, is a CUDA build of 5.5 GB (pip takes it from this
machine's disk; it runs on the CPU): the tests that build it are marked
`torch_release` and run with `make test-torch`, not in CI.
"""

from __future__ import annotations

import json

import pytest

from conftest import FI_NEW, doctor
from graphbreak_doctor.matrix.envs import Environments, EnvSpec, installed, release_torch

RUNNING = installed("torch").split("+", 1)[0]
OTHER = "2.14.1"
# A library call Dynamo refuses in both releases, in words of each release's own.
CTYPES = "fixtures.breaks.opaque_ctypes:target"


def test_the_spec_pins_its_torch_and_this_interpreters_release_is_the_usual_environment(envs_dir):
    spec = EnvSpec(flashinfer=FI_NEW, torch=OTHER)
    assert f"torch=={OTHER}" in spec.requirement_files()["base.txt"].splitlines()
    assert spec.label == f"flashinfer {FI_NEW}, torch {OTHER}"
    assert f"torch-{OTHER}-" in spec.folder_name(installed("torch"))
    environments = Environments(envs_dir)
    assert environments.path(EnvSpec(flashinfer=FI_NEW, torch=RUNNING)) == environments.path(EnvSpec(flashinfer=FI_NEW))
    assert environments.path(spec) != environments.path(EnvSpec(flashinfer=FI_NEW))


def test_a_reference_cell_says_which_torch_ran(tmp_path, envs_dir):
    out = tmp_path / "m.json"
    proc = doctor("matrix", "--layer", "dense", "--impl", "reference", "--torch", RUNNING, "--mode", "fullgraph",
                  "--envs", str(envs_dir), "--no-html", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0].endswith(f", torch {RUNNING}")
    assert f"flashinfer {FI_NEW} + torch {RUNNING}" in proc.stdout
    data = json.loads(out.read_text())
    (cell,) = data["cells"]
    assert cell["torch"] == RUNNING and cell["status"] == "failed"
    assert cell["findings"]["environment"]["torch"].split("+", 1)[0] == RUNNING


def test_each_sglang_release_pins_its_own_torch_read_from_its_wheel():
    """`--torch release`: each SGLang release's cells hold the torch its wheel
    pins (0.5.21 the one these machines run, 0.5.23 the CUDA build)."""
    assert release_torch("sglang", "0.5.21", []) == "2.13.0"
    assert release_torch("sglang", "0.5.23", []) == "2.14.1"


def test_torch_release_needs_sglang_releases(tmp_path):
    proc = doctor("matrix", "--layer", "dense", "--impl", "reference", "--torch", "release", "--no-html",
                  cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "--torch release holds each SGLang release's own torch" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


@pytest.mark.torch_release
def test_two_torch_releases_answer_the_same_break_in_their_own_words(tmp_path, envs_dir):
    """A ctypes function called from the traced code: Dynamo 2.13 calls it an
    unsupported method call, 2.14.1 a callable object with no traceable
    __call__ -- one site, one category, two releases' words; the diff
    between the two cells is on the torch axis."""
    out = tmp_path / "m.json"
    proc = doctor("matrix", "--target", CTYPES, "--torch", f"{RUNNING},{OTHER}", "--mode", "fullgraph",
                  "--envs", str(envs_dir), "--no-html", "--json", str(out), cwd=tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    by_torch = {c["torch"]: c for c in data["cells"]}
    assert set(by_torch) == {RUNNING, OTHER}
    for version, cell in by_torch.items():
        assert cell["findings"]["environment"]["torch"].startswith(version)
        assert cell["category"] == "opaque-call" and cell["function"] == "scale_factor"
    assert by_torch[RUNNING]["reason"] == "Unsupported method call"
    assert by_torch[OTHER]["reason"] == "call to a callable object with no traceable __call__"
    (diff,) = [d for d in data["diffs"] if d["axis"] == "torch"]
    assert (diff["a"], diff["b"]) == (RUNNING, OTHER) and "1 break gone, 1 new" in diff["summary"]


@pytest.mark.torch_release
def test_the_reference_layer_traces_alike_on_a_cuda_build_with_no_gpu(tmp_path, envs_dir):
    """The emulation holds on torch's CUDA build with no GPU present: the
    reference dense layer's fullgraph verdict is the CPU build's."""
    out = tmp_path / "m.json"
    proc = doctor("matrix", "--layer", "dense", "--impl", "reference", "--torch", f"{RUNNING},{OTHER}",
                  "--mode", "fullgraph", "--envs", str(envs_dir), "--no-html", "--json", str(out), cwd=tmp_path,
                  timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = json.loads(out.read_text())["cells"]
    assert [(c["torch"], c["status"], c["category"], c["function"]) for c in cells] == [
        (RUNNING, "failed", "subprocess", "get_cuda_version"), (OTHER, "failed", "subprocess", "get_cuda_version")]
    assert "+cu" in cells[1]["findings"]["environment"]["torch"]


@pytest.mark.torch_release
def test_trace_torch_traces_in_that_environment(tmp_path):
    out = tmp_path / "f.json"
    proc = doctor("trace", "--target", CTYPES, "--torch", OTHER, "--mode", "fullgraph", "--json", str(out),
                  "--no-html", cwd=tmp_path.parent, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    findings = json.loads(out.read_text())
    assert findings["environment"]["torch"].startswith(OTHER)
    assert f"torch {OTHER}" in proc.stdout

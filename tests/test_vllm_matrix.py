"""The matrix's vLLM axis (``matrix --model --vllm V1,...``): each release
in an environment of its own, built by uv from the project's vLLM file and
the release's own pins; each cell vLLM's compile map and CUDA-graph map of
the served model in that release.

The real run builds two vLLM environments (0.33.0, the release the project
pins, and 0.34.0, whose GPU runner captures through a CUDA-graph manager
instead of 0.33.0's dispatcher) and is marked ``vllm_matrix`` (its own CI
stage); the bad-input tests need no environment and run in the main stage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FI_NEW, doctor

RELEASES = ("0.33.0", "0.34.0")
LAUNCH = "--max-num-seqs 8"


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory, envs_dir):
    """One real matrix: Qwen3-MoE's config as each vLLM release serves it, emulated H100."""
    out = tmp_path_factory.mktemp("vllm-matrix")
    proc = doctor("matrix", "--model", "--vllm", ",".join(RELEASES), "--flashinfer", FI_NEW,
                  "--model-path", "qwen3-30b-a3b", "--device", "sm90", "--vllm-args", LAUNCH, "--jobs", "2",
                  "--envs", str(envs_dir), "--json", str(out / "m.json"), "--html", str(out / "m.html"), cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads((out / "m.json").read_text()), out


@pytest.mark.vllm_matrix
def test_each_release_maps_the_model_in_its_own_environment(vllm_run):
    proc, data, _out = vllm_run
    assert data["releases"] == list(RELEASES) and data["framework"] == data["impl"] == "vllm"
    assert data["launch"] == LAUNCH.split() and data["model"] == "Qwen3MoeForCausalLM"
    for release in RELEASES:
        row = next(ln for ln in proc.stdout.splitlines() if ln.startswith(f"vllm {release} + flashinfer {FI_NEW}"))
        assert "OK: prefill: vLLM's profile run" in row, row
    for cell in data["cells"]:
        findings = cell["findings"]
        # The trace ran the cell's vLLM and FlashInfer, not this interpreter's.
        assert cell["framework"] == "vllm" and findings["environment"]["vllm"] == cell["release"]
        assert findings["environment"]["flashinfer"] == cell["flashinfer"] == FI_NEW
        launch = findings["target"]["facts"]["launch"]
        assert launch["release"] == cell["release"] and launch["args"] == LAUNCH.split()
        assert launch["resolved"]["max_num_seqs"] == 8 and launch["resolved"]["mode"] == "VLLM_COMPILE"
        # The decorated forward, traced as vLLM compiles it: fullgraph, verdict ok.
        (region,) = cell["regions"]
        assert region["function"].endswith("Qwen3MoeModel.forward") and region["verdict"] == "ok"
        assert region["options"]["fullgraph"] is True
        assert cell["status"] == "ok" and all(s.startswith("vLLM said: ") for s in cell["said"])


@pytest.mark.vllm_matrix
def test_both_runners_capture_their_cuda_graphs(vllm_run):
    """0.33.0's runner lists its captures with a dispatcher, 0.34.0's with a
    CUDA-graph manager that captures FULL batches in a graph of its own: both
    are captured with the release's own code, at three sizes per mode."""
    _proc, data, _out = vllm_run
    for cell in data["cells"]:
        graphs = cell["findings"]["cudagraphs"]
        assert not graphs["error"], graphs["error"]
        phases = {p["phase"]: p for p in graphs["phases"]}
        assert set(phases) == {"mixed prefill-decode", "decode"}, cell["release"]
        piecewise, full = phases["mixed prefill-decode"], phases["decode"]
        assert piecewise["backend"] == "piecewise" and full["backend"] == "full"
        # A uniform decode batch has one token per request: never more than --max-num-seqs.
        assert max(full["sizes"]) <= 8 < max(piecewise["sizes"])
        for phase, segments in ((piecewise, 2), (full, 1)):
            assert len(phase["captures"]) == 3
            for capture in phase["captures"]:
                assert not capture["error"] and not capture["hazards"], capture
                assert capture["segments"] == segments, (cell["release"], phase["phase"], capture)
        breaks = {b["function"] for c in piecewise["captures"] for b in c["breaks"]}
        assert any("vllm::unified_attention_with_output" in b for b in breaks), breaks
    manager = next(c for c in data["cells"] if c["release"] == "0.34.0")
    how = next(p["how"] for p in manager["findings"]["cudagraphs"]["phases"] if p["phase"] == "decode")
    assert "manager's own CUDA graph" in how


@pytest.mark.vllm_matrix
def test_an_environment_holds_the_release_own_pins_or_says_why(vllm_run, envs_dir):
    """Every requirement a release's metadata makes on a package of its
    environment is met there, or the cell's environment notes name it (the
    cell's own torch and FlashInfer)."""
    _proc, data, _out = vllm_run
    check = ("import importlib.metadata as m, json\n"
             "from packaging.requirements import Requirement\n"
             "unmet = []\n"
             "for line in m.requires('vllm'):\n"
             "    r = Requirement(line)\n"
             "    if r.marker is not None and ('extra' in str(r.marker) or not r.marker.evaluate()):\n"
             "        continue\n"
             "    try:\n"
             "        have = m.version(r.name)\n"
             "    except m.PackageNotFoundError:\n"
             "        continue\n"
             "    if not r.specifier.contains(have, prereleases=True):\n"
             "        unmet.append(r.name)\n"
             "print(json.dumps(unmet))\n")
    from graphbreak_doctor.matrix.envs import Environments, EnvSpec

    environments = Environments(Path(envs_dir))
    for cell in data["cells"]:
        env = environments.path(EnvSpec("vllm", cell["release"], FI_NEW))  # this doctor's environment of the release
        unmet = json.loads(subprocess.run([str(env / "bin" / "python"), "-c", check], check=True,
                                          capture_output=True, text=True).stdout)
        assert "torch" in unmet  # both releases pin a CUDA torch; the cell holds this interpreter's
        for name in unmet:
            assert any(f"asks {name}" in note for note in cell["environment"]), (cell["release"], name)
    followed = json.loads((environments.path(EnvSpec("vllm", "0.34.0", FI_NEW)) / "matrix-env.json").read_text())
    # 0.34.0 asks a newer huggingface-hub than the project's vLLM file pins: followed, with its dependencies.
    assert followed["followed_release_pins"].get("huggingface-hub", "").startswith("2.")


@pytest.mark.vllm_matrix
def test_neighbouring_releases_are_compared(vllm_run):
    proc, data, out = vllm_run
    (diff,) = data["diffs"]
    assert (diff["axis"], diff["a"], diff["b"]) == ("vllm", *RELEASES)
    assert f"{RELEASES[0]} -> {RELEASES[1]}:" in proc.stdout
    page = (out / "m.html").read_text()
    for release in RELEASES:
        assert f"vllm {release} + flashinfer {FI_NEW}" in page
        assert (out / "m-cells" / f"vllm-{release}-flashinfer-{FI_NEW}-sm90-model.html").is_file()


@pytest.mark.vllm_matrix
def test_a_launch_no_release_takes_is_bad_input(tmp_path, envs_dir):
    proc = doctor("matrix", "--model", "--vllm", RELEASES[-1], "--flashinfer", FI_NEW, "--model-path",
                  "qwen3-30b-a3b", "--device", "sm90", "--vllm-args", "--no-such-option 1", "--envs", str(envs_dir),
                  "--json", str(tmp_path / "m.json"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"graphbreak-doctor: error: no release in the matrix takes the launch arguments: "
                           f"vLLM {RELEASES[-1]}: ") and "--no-such-option" in line, line
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("args, said", [
    (("--vllm", "0.33.0"), "--model"),
    (("--layer", "dense", "--vllm", "0.33.0"), "leave out --layer"),
    (("--model", "--vllm", "0.33.0", "--sglang", "0.5.23"), "leave out --sglang"),
    (("--model", "--vllm", "0.33.0", "--sglang-args", "--tp 1"), "leave out --sglang-args"),
    (("--model", "--vllm-args", "--max-num-seqs 8"), "--vllm-args needs --vllm"),
    (("--model", "--vllm", "0.33.0", "--vllm-args", ""), "--vllm-args is empty"),
    (("--model", "--vllm", "0.33.0", "--mode", "fullgraph"), "not --mode fullgraph"),
    (("--model", "--vllm", "0.33.0", "--torch", "release"), "leave out --torch release"),
    (("--model", "--vllm", "zero"), "not a version"),
    (("--model", "--vllm", "0.33.0", "--model-path", "/no/such/folder"), "/no/such/folder"),
])
def test_bad_vllm_matrix_input_is_one_line(tmp_path, args, said):
    proc = doctor("matrix", *args, "--json", str(tmp_path / "m.json"), "--envs", str(tmp_path / "envs"),
                  cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert said in lines[-1] and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "envs").exists()


@pytest.mark.vllm_matrix
def test_the_same_matrix_on_a_ray_cluster(vllm_run, envs_dir, tmp_path):
    """The vLLM axis on a real local Ray cluster of two nodes (tests/ray_cluster.py):
    the same table and cells as the local run, each built and traced on a node."""
    pytest.importorskip("ray", reason="Ray is an optional extra (requirements/ray.txt)")
    from ray_cluster import NoNamespace, loopback_cluster, popen_in_ns
    from test_matrix_ray import _comparable, _table

    local, local_data, _out = vllm_run
    try:
        cluster = loopback_cluster(nodes=2, cpus=1, port=6390)
        ns, address = cluster.__enter__()
    except NoNamespace as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no network namespace here: {e}")
    try:
        proc = popen_in_ns(ns, sys.executable, "-m", "graphbreak_doctor", "matrix", "--model", "--vllm",
                           ",".join(RELEASES), "--flashinfer", FI_NEW, "--model-path", "qwen3-30b-a3b", "--device",
                           "sm90", "--vllm-args", LAUNCH, "--envs", str(envs_dir), "--json", str(tmp_path / "m.json"),
                           "--executor", "ray", "--address", address, cwd=tmp_path)
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        cluster.__exit__(None, None, None)
    assert proc.returncode == 0, stderr[-3000:]
    assert _table(stdout) == _table(local.stdout)
    assert f"on the Ray cluster at {address} (2 nodes, 2 CPUs)" in stdout
    ours = json.loads((tmp_path / "m.json").read_text())
    assert [_comparable(c) for c in ours["cells"]] == [_comparable(c) for c in local_data["cells"]]


def test_what_an_environment_follows_of_a_release_and_what_it_keeps():
    """The rules an environment follows a release's requirements by, on lines
    of vLLM 0.25.0's and 0.34.0's metadata and FlashInfer 0.7.4's: a pin the
    file does not meet is followed, a range's lowest version too; the cell's
    torch and FlashInfer are kept, and so is a version the cell's FlashInfer
    refuses; a package the file does not pin, an extra's and a marker that
    does not hold here are left alone."""
    from graphbreak_doctor.targets.frameworks.vllm.environment import choose

    release = ["torch==2.11.0", "flashinfer-python==0.6.13", "nvidia-cutlass-dsl[cu13]==4.5.2",
               "huggingface-hub>=2.0.0", "transformers<5.23.0,>=5.16.1", "lark==1.2.2",
               'setuptools<81.0.0,>=78.1.1; python_version > "3.11"', 'pytest; extra == "test"']
    pins = {"torch": "2.13.0", "flashinfer-python": "0.7.4", "nvidia-cutlass-dsl": "4.8.1",
            "huggingface-hub": "1.33.0", "transformers": "5.19.0", "setuptools": "84.2.1", "pytest": "9.0.0"}
    follow, notes = choose(release, pins, "0.25.0", ["nvidia-cutlass-dsl>=4.8.0", "apache-tvm-ffi<0.2,>=0.1.11"])
    assert follow == {"huggingface-hub": "2.0.0"}
    assert notes == ["vLLM 0.25.0 asks torch==2.11.0; the cell holds 2.13.0",
                     "vLLM 0.25.0 asks flashinfer-python==0.6.13; the cell holds 0.7.4",
                     "vLLM 0.25.0 asks nvidia-cutlass-dsl==4.5.2; the cell's FlashInfer asks "
                     "nvidia-cutlass-dsl>=4.8.0: kept 4.8.1"]

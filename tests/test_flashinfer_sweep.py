"""Emulation breadth: every FlashInfer kernel entry point family that SGLang
and vLLM call (fixtures/flashinfer_sweep.py), on each emulated device.

One process per device traces its entry points (tests/flashinfer_sweep_worker.py),
all devices at once (the devices' costs differ: on two cores, three processes
at once finish sooner than two at a time); explain mode finds every break. For each entry point:
- it must not end as the CLI's exit 2 (the target raises without
  torch.compile) or exit 3 (a crash under Dynamo): on these machines either
  would be the emulation failing where a GPU does not -- except a crash of
  Dynamo's own (DYNAMO_CRASHES), outside the emulation, which a GPU has too;
- no break may point into the emulation (a frame, or the refused callable);
- no break may be `other`: each is classified;
- the findings record which emulated torch.cuda entry points it exercised.

Runs in both FlashInfer environments (marker `flashinfer`); skip locally with
-m 'not sweep'. The CLI test at the end is the issue's example as a user runs it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.flashinfer_version, pytest.mark.sweep]

# Installed or not, read from its metadata: some FlashInfer releases ask the
# CUDA device while they import, so this process never imports it (each entry
# point is traced in a worker, inside the emulated device).
if not importlib.util.find_spec("flashinfer"):
    pytest.skip("FlashInfer is not installed", allow_module_level=True)

from fixtures.flashinfer_sweep import ALL, ENTRY_POINTS  # noqa: E402

WORKER = ROOT / "tests" / "flashinfer_sweep_worker.py"
EMULATION = ("graphbreak_doctor/emulation", "graphbreak_doctor.emulation")
# The user's story's device on every FlashInfer release; the others with the
# current one (the 0.6.3 stage deselects `one_flashinfer`).
STORY_DEVICE = "sm120"


def _device_param(device: str, *rest: str) -> object:
    return pytest.param(device, *rest, marks=() if device == STORY_DEVICE else pytest.mark.one_flashinfer)


CASES = [(device, e.factory) for device in ALL for e in ENTRY_POINTS if device in e.devices]

# Crashes inside Dynamo itself, on FlashInfer's code and whatever the device
# (exit 3 either way); anything else that crashes fails the sweep.
DYNAMO_CRASHES = {
    # Dynamo's bytecode transformation on FlashInfer 0.6.x's autotuner (its
    # `try` blocks); tests/golden records the same crash for the GLM-5 layers.
    "exception table entry start instruction has no offset":
        "Dynamo cannot rebuild the exception table of FlashInfer 0.6's autotuner",
}


def _run_device(device: str, folder) -> dict:
    specs = [spec for d, spec in CASES if d == device]
    out = folder / f"{device}.json"
    done = subprocess.run([sys.executable, str(WORKER), device, str(out), *specs], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200, check=False)
    if done.returncode != 0 or not out.exists():
        tail = "\n".join(done.stderr.splitlines()[-20:])
        raise AssertionError(f"the sweep worker for {device} exited {done.returncode}:\n{tail}")
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sweep(request, tmp_path_factory) -> dict:
    """Each device the selected tests ask for, traced once (one process each, at once)."""
    folder = tmp_path_factory.mktemp("sweep")
    asked = {item.callspec.params.get("device") for item in request.session.items
             if item.module is request.module and hasattr(item, "callspec")}
    devices = [d for d in ALL if d in asked]
    with ThreadPoolExecutor(max_workers=len(devices) or 1) as pool:
        results = dict(zip(devices, pool.map(lambda d: _run_device(d, folder), devices)))
    return {(device, spec): result for device, by_spec in results.items() for spec, result in by_spec.items()}


def _result(sweep: dict, device: str, spec: str) -> dict:
    result = sweep[(device, spec)]
    if result["outcome"] == "missing":
        pytest.skip(result["message"])
    return result


@pytest.mark.parametrize("device,spec", [_device_param(d, s) for d, s in CASES],
                         ids=[f"{d}-{s.split(':')[1]}" for d, s in CASES])
def test_entry_point_traces_on_the_emulated_gpu(sweep, device, spec):
    result = _result(sweep, device, spec)
    assert result["outcome"] != "target-error", f"exit 2 on {device}: {result['message']}"
    findings = result.get("findings") or {}
    if result["outcome"] == "crash":
        known = [why for text, why in DYNAMO_CRASHES.items() if text in result["message"]]
        site = (findings.get("fullgraph") or {}).get("site") or {}
        assert known and not any(e in site.get("file", "") for e in EMULATION), (
            f"exit 3 on {device}: {result['message']}")
    for brk in findings["breaks"]:
        frames = [brk["site"], *brk.get("stack", [])]
        assert not any(any(e in f["file"] for e in EMULATION) for f in frames), (
            f"a break points into the emulation: {brk['gb_type']} at {brk['site']['file']}:{brk['site']['line']}")
        assert not any(e in (brk.get("culprit") or "") for e in EMULATION), brk["culprit"]
        assert brk["category"] != "other", (
            f"unclassified break {brk['gb_id']} {brk['gb_type']!r} at {brk['site']['file']}:{brk['site']['line']}")
    assert isinstance(findings["device"].get("emulated_entry_points"), list)


# Entry points that must reach a given part of the emulated CUDA runtime:
# the sampler draws its seed and offset from the default CUDA generator; a
# seeded sampler brings its own generator.
EXERCISED = {
    "fixtures.flashinfer_sweep:top_k_sampling": ("torch.cuda.init", "torch.Generator(cuda) state"),
    "fixtures.flashinfer_sweep:sampling_with_generator": ("torch.Generator(device='cuda')",),
    "fixtures.flashinfer_sweep:rmsnorm": ("torch.cuda.get_device_capability",),
}


@pytest.mark.parametrize("spec", sorted(EXERCISED))
@pytest.mark.parametrize("device", [_device_param(d) for d in ALL])
def test_findings_name_the_emulated_entry_points_exercised(sweep, device, spec):
    result = _result(sweep, device, spec)
    exercised = result["findings"]["device"]["emulated_entry_points"]
    for name in EXERCISED[spec]:
        assert name in exercised, f"{spec} on {device} exercised {exercised}"


def test_sampling_example_from_the_cli(cli, tmp_path):
    """The example a user hit: top_k_sampling_from_probs on an emulated SM120
    exited 2 ("Torch not compiled with CUDA enabled"). Both modes now trace it."""
    out = tmp_path / "sampling.json"
    done = cli("trace", "--target", "fixtures.flashinfer_sweep:top_k_sampling", "--device", "sm120",
               "--json", str(out), "--no-html")
    assert done.returncode in (0, 1), done.stderr
    assert "Torch not compiled with CUDA" not in done.stdout + done.stderr
    findings = json.loads(out.read_text(encoding="utf-8"))
    assert findings["modes"] == ["explain", "fullgraph"]
    assert findings["fullgraph"]["ok"] is False and findings["breaks"]
    assert "torch.cuda.init" in findings["device"]["emulated_entry_points"]

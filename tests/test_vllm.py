"""vLLM as a framework (--vllm-args): its launch resolved by the installed
vLLM, its model built by its own loader, its compiled forward traced as vLLM
compiles it. Runs in the vLLM environment (make test-vllm); each trace once
(the shared traces, tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, run_cli

HAS_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed")]

QWEN3 = ("--vllm-args", "qwen3-30b-a3b", "--device", "sm90", "--mode", "map")

# vLLM's own resolution of a launch, in a fresh interpreter inside the
# emulated H100 (the stand-ins and vLLM's CUDA platform as the doctor installs
# them), compared with what the doctor's launch module records for the same
# launch: the engine's arguments built directly (EngineArgs), not through the
# server's parser the doctor uses.
RESOLVE = textwrap.dedent("""
    import json, sys
    from graphbreak_doctor.diagnose import inside_device
    from graphbreak_doctor.emulation import standins
    from graphbreak_doctor.targets.frameworks import registry
    from graphbreak_doctor.targets.frameworks.vllm import emulation, launch
    from graphbreak_doctor.targets.models.packaged import config_dir

    out = []
    with inside_device("sm90") as (dev, log):
        installed = registry.install_stand_ins(log)
        emulation.isolate_caches(log, emulation.scratch(log))
        emulation.accelerator_streams(log)
        emulation.install_platform(log)
        emulation.inspect_in_process(log)
        from vllm.engine.arg_utils import EngineArgs
        from vllm.usage.usage_lib import UsageContext
        folder = str(config_dir("qwen3-30b-a3b"))
        for args, kwargs in json.loads(sys.argv[1]):
            config, said = launch.resolve(tuple(args), folder)
            ours = launch.describe(config, said, tuple(args))["resolved"]
            theirs = EngineArgs(model=folder, load_format="dummy", **kwargs).create_engine_config(
                usage_context=UsageContext.OPENAI_API_SERVER)  # what `vllm serve` resolves with
            cc = theirs.compilation_config
            out.append({"ours": ours, "theirs": {
                "mode": cc.mode.name, "backend": cc.backend, "cudagraph_mode": cc.cudagraph_mode.name,
                "splitting_ops": list(cc.splitting_ops), "dynamic_shapes": cc.dynamic_shapes_config.type.name,
                "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes),
                "compile_ranges": [str(r) for r in cc.get_compile_ranges()],
                "max_num_batched_tokens": theirs.scheduler_config.max_num_batched_tokens,
                "max_num_seqs": theirs.scheduler_config.max_num_seqs,
                "enforce_eager": theirs.model_config.enforce_eager}})
    print(json.dumps(out))
""")


def test_launch_is_what_vllm_resolves(tmp_path):
    """Every compile setting the map records equals vLLM's own resolution of
    the same launch, field by field; a changed launch changes them as vLLM
    does; --enforce-eager and -O0 resolve to nothing compiled, with why."""
    launches = [([], {}),
                (["--max-num-seqs", "8", "-cc.cudagraph_capture_sizes=[1,2,4]"],
                 {"max_num_seqs": 8, "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4]}}),
                (["--enforce-eager"], {"enforce_eager": True}),
                (["-O0"], {"optimization_level": 0})]
    script = tmp_path / "resolve.py"
    script.write_text(RESOLVE)
    done = subprocess.run([sys.executable, str(script), json.dumps(launches)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for (args, _), result in zip(launches, results):
        for field, value in result["theirs"].items():
            assert result["ours"][field] == value, (args, field)
    default, changed, eager, level0 = (r["ours"] for r in results)
    assert default["mode"] == "VLLM_COMPILE" and default["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert "vllm::unified_attention_with_output" in default["splitting_ops"]
    assert changed["cudagraph_capture_sizes"] == [1, 2, 4] and changed["max_num_seqs"] == 8
    assert changed["cudagraph_capture_sizes"] != default["cudagraph_capture_sizes"]
    assert eager["mode"] == "NONE" and eager["not_compiled_because"] == ["enforce_eager=True (--enforce-eager)"]
    assert level0["mode"] == "NONE" and "optimization level O0" in level0["not_compiled_because"]


def test_default_launch_map(traces):
    """Qwen3-MoE on an emulated H100, default launch: vLLM's decorated forward
    is the one region, compiled with fullgraph=True, its token dimension
    marked dynamic by vLLM, traced OK and cut by vLLM's own split_graph at its
    attention ops."""
    traced = traces.get(*QWEN3)
    assert traced.code == 0, traced.stderr[-3000:]
    found = traced.findings
    launch = found.target.facts["launch"]
    assert launch["resolved"]["mode"] == "VLLM_COMPILE"
    (region,) = [r for r in found.regions if r.entered]
    assert region.function.endswith("Qwen3MoeModel.forward")
    assert region.options["fullgraph"] is True and region.options["dynamic"] is False
    assert region.options["backend"] == "vllm.compilation.backends.VllmBackend"
    assert region.options["marked_dynamic"] == "input_ids[0], positions[0]"
    assert region.verdict == "ok" and region.graphs == 1 and not region.breaks
    # One decoder layer: the attention (with its cache update) is one piece
    # between two, as vLLM's split_graph keeps consecutive split ops together.
    assert region.pieces == 3
    assert region.split_ops == ["vllm::unified_kv_cache_update + vllm::unified_attention_with_output"]
    assert "profile" in launch["phases"] and "compiled by vLLM" in launch["phases"]["profile"]


def test_default_launch_cudagraph_map(traces):
    """The same launch's CUDA-graph map, captured with vLLM's own capture
    code: the batches the launch's runner lists for its FULL_AND_PIECEWISE
    mode (vLLM's model runner V2, its default: a CUDA-graph manager that
    captures FULL batches in a graph of its own), at the smallest, a middle
    and the largest of its capture sizes. PIECEWISE: a graph per piece of
    the split forward, the attention ops run eagerly between them (the ops
    the split was cut at); FULL: one graph around the whole model. No
    hazard in vLLM's Qwen3-MoE."""
    traced = traces.get(*QWEN3)
    assert traced.code == 0, traced.stderr[-3000:]
    full = _qwen3_cudagraph_map(traced.findings)
    assert "manager's own CUDA graph" in full.how


def test_the_v1_runner_captures_through_its_dispatcher(tmp_path):
    """The same launch on vLLM's V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0,
    as a user opts out): its dispatcher lists the batches and its
    CUDAGraphWrapper around the whole model captures the FULL ones; the
    segments and breaks are the V2 runner's."""
    import os

    from graphbreak_doctor.model import Findings

    out = tmp_path / "v1.json"
    done = run_cli("trace", *QWEN3, "--json", str(out), "--no-html",
                   env={**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "0", "GRAPHBREAK_DOCTOR_NO_CACHE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    full = _qwen3_cudagraph_map(Findings.from_dict(json.loads(out.read_text())))
    assert "CUDAGraphWrapper around the whole model" in full.how


def _qwen3_cudagraph_map(found):
    """The checks both runners' maps of the default Qwen3-MoE launch pass; returns the FULL phase."""
    from graphbreak_doctor.targets.provider import pick_sizes

    resolved = found.target.facts["launch"]["resolved"]
    assert resolved["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    cudagraphs = found.cudagraphs
    assert not cudagraphs.error and [(p.phase, p.backend) for p in cudagraphs.phases] == [
        ("mixed prefill-decode", "piecewise"), ("decode", "full")]
    (region,) = [r for r in found.regions if r.entered]
    piecewise, full = cudagraphs.phases
    assert piecewise.sizes == resolved["cudagraph_capture_sizes"]
    # A uniform decode batch has one token per request: never more than the launch's requests.
    assert max(full.sizes) <= resolved["max_num_seqs"]
    for phase in cudagraphs.phases:
        assert [c.size for c in phase.captures] == pick_sizes(phase.sizes)
        assert all(not c.error and not c.hazards for c in phase.captures), phase.captures
    for capture in piecewise.captures:
        # Three pieces: two captured, the attention piece between them eager.
        assert capture.segments == region.pieces - len(region.split_ops) == 2
        assert [(b.function, b.count) for b in capture.breaks] == [(region.split_ops[0], 1)]
    assert all(c.segments == 1 and not c.breaks for c in full.captures)
    return full


def test_fix_ladder_on_a_vllm_target_ends_fullgraph_ok(tmp_path):
    """The fix ladder on the break in the tests' own model class, called as
    vLLM compiles it (its token dimension marked dynamic by vLLM's own
    decorator code): the helper becomes one opaque op whose fake is a shape
    rule (it answers the symbolic token count), and fullgraph holds. A
    written patch is proven at vLLM's compile-range ends and the smallest, a
    middle and the largest of its capture sizes."""
    from fixtures import vllm_models
    from graphbreak_doctor.targets.frameworks import registry

    env, folder = _plugin(tmp_path, vllm_models.ARCH)
    out = tmp_path / "fix.json"
    done = run_cli("fix", "--vllm-args", folder, "--device", "sm90", "--json", str(out), "--no-html", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["fix"]["ok"] is True and found["fix"]["recipes"] == ["wrap-custom-op"], found["fix"]
    (kept,) = [r for r in found["ladder"] if r["result"] == "fullgraph ok"]
    assert "fake inferred as a shape rule" in kept["detail"] and "tuned_scale" in kept["detail"]
    assert "hidden.new_empty((hidden.shape[0], hidden.shape[1])" in kept["patch"]
    # Where to change it: the model's line that calls the helper, not vLLM's compile wrapper that entered the forward.
    assert all(r["where"].endswith("vllm_models.py:GbdQwen3MoeModel.forward") for r in found["ladder"]), found["ladder"]
    assert any(n.startswith("marked dynamic by vLLM's decorator: input_ids[0]") for n in found["target"]["notes"])
    resolved = found["target"]["facts"]["launch"]["resolved"]
    sizes, said = registry.get("vllm").server_sizes({"resolved": resolved}, "profile")
    assert sizes == [1, 184, 512, 8192] and "compile range ends" in said


def test_a_sync_outside_the_compiled_forward_is_a_hazard_of_the_full_capture_only(tmp_path):
    """The tests' own model class calls a kernel wrapper that waits for the
    device after its backbone, outside the compiled forward: the compile is
    clean, the PIECEWISE captures (the compiled pieces) never run it, and
    every FULL capture (the whole model) finds the wait as cudagraph-sync
    at the wrapper's line, with a fix."""
    from fixtures import vllm_models

    env, folder = _plugin(tmp_path, vllm_models.SYNC_ARCH)
    out = tmp_path / "f.json"
    done = run_cli("trace", "--vllm-args", folder, "--device", "sm90", "--mode", "map", "--json", str(out),
                   "--no-html", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    (region,) = [r for r in found["regions"] if r["calls"]]
    assert region["verdict"] == "ok"
    piecewise, full = found["cudagraphs"]["phases"]
    assert (piecewise["backend"], full["backend"]) == ("piecewise", "full")
    assert all(not c["error"] and not c["hazards"] and c["segments"] == 2 for c in piecewise["captures"])
    assert len(full["captures"]) == 3
    for capture in full["captures"]:
        assert not capture["error"], capture
        (hazard,) = capture["hazards"]
        assert hazard["category"] == "cudagraph-sync" and hazard["what"] == "torch.cuda.synchronize()"
        assert hazard["site"]["function"] == "synchronizing_scale"
        assert hazard["site"]["code"] == "torch.cuda.synchronize()"
        assert hazard["fix"] and hazard["fix_text"]


def test_glm5_breakable_cudagraph_map(tmp_path):
    """GLM-5-NVFP4, default launch: vLLM compiles nothing and captures mixed
    batches with its breakable CUDA graph -- one capture of the whole model
    that vLLM breaks at each layer's sparse attention (run eagerly): a
    segment more than the breaks, one break per decoder layer run -- and
    decode batches with one full graph."""
    out = tmp_path / "f.json"
    done = run_cli("trace", "--vllm-args", "glm5-nvfp4", "--mode", "map", "--json", str(out), "--no-html")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    layers = found["target"]["facts"]["layers_built"]
    phases = found["cudagraphs"]["phases"]
    assert [(p["phase"], p["backend"]) for p in phases] == [("mixed prefill-decode", "breakable"), ("decode", "full")]
    breakable, full = phases
    assert len(breakable["captures"]) == 3 and len(full["captures"]) == 3
    for capture in breakable["captures"]:
        assert not capture["error"] and not capture["hazards"], capture
        (eager,) = capture["breaks"]
        assert eager["function"].endswith("._sparse_indexer_and_attn") and eager["count"] == layers
        assert capture["segments"] == layers + 1
        assert "/vllm/" in eager["site"]["file"]
    assert all(c["segments"] == 1 and not c["breaks"] and not c["hazards"] for c in full["captures"])
    assert "CUDA-graph map: 2 phases captured: no capture hazard found" in done.stdout


def test_glm5_is_not_compiled_and_its_forced_compile_names_the_first_failing_frame(tmp_path):
    """GLM-5-NVFP4, default launch, emulated RTX PRO 6000 Blackwell: vLLM
    puts it on its breakable-CUDA-graph list (compiled by nothing, in vLLM's
    words), and the model builds through vLLM's own loader (its weight
    post-processing reads the dummy weights' values: known or bounded here)
    so that `--mode fullgraph` answers what vLLM's users ask: what would
    fail if its forward were compiled with fullgraph=True -- a frame inside
    vLLM, with its category and a fix."""
    out = tmp_path / "f.json"
    done = run_cli("trace", "--vllm-args", "glm5-nvfp4", "--mode", "fullgraph", "--json", str(out), "--no-html")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    facts = found["target"]["facts"]
    # vLLM's registry serves the GLM-5 architecture with its DeepSeek-V3.2 class.
    assert facts["model_class"] == "DeepseekV32ForCausalLM" and facts["layers_built"] < facts["model_layers"]
    phase = facts["launch"]["phases"]["profile"]
    assert "not compiled" in phase and "VLLM_USE_BREAKABLE_CUDAGRAPH=1" in phase and "GlmMoeDsaForCausalLM" in phase
    assert not [r for r in found["regions"] if r["calls"]]
    assert found["fullgraph"]["ran"] and not found["fullgraph"]["ok"] and not found["fullgraph"]["crashed"]
    (first,) = [b for b in found["breaks"] if b["id"] == found["fullgraph"]["break_id"]]
    assert first["package"] == "vllm" and "/vllm/" in first["actionable_frame"]["file"]
    assert first["category"] and first["fix"]["recipe"] and first["fix"]["summary"]
    assert "fullgraph: FAILED" in done.stdout and first["actionable_frame"]["function"] in done.stdout


@pytest.mark.parametrize("args, why", [("qwen3-30b-a3b --enforce-eager", "enforce_eager=True"),
                                       ("qwen3-30b-a3b -cc.mode=1", None)])
def test_launches_that_compile_otherwise(tmp_path, args, why):
    """--enforce-eager compiles nothing, and the map says why; -cc.mode=1
    (STOCK_TORCH_COMPILE) compiles the whole model with fullgraph=True."""
    out = tmp_path / "f.json"
    done = run_cli("trace", "--vllm-args", args, "--device", "sm90", "--mode", "map", "--json", str(out), "--no-html")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    phase = found["target"]["facts"]["launch"]["phases"]["profile"]
    entered = [r for r in found["regions"] if r["calls"]]
    if why:
        assert "not compiled" in phase and why in phase and not entered
        assert re.search(r"nothing in this launch \(vLLM [\w.+]+\) is compiled with fullgraph=True", done.stdout)
    else:
        (region,) = entered
        assert region["function"].endswith("Qwen3MoeForCausalLM.forward") and region["options"]["fullgraph"]
        assert region["verdict"] == "ok" and "STOCK_TORCH_COMPILE" in phase


@pytest.mark.parametrize("args, said", [
    ("qwen3-30b-a3b --no-such-option 3", "unrecognized arguments: --no-such-option"),
    ("qwen3-30b-a3b --max-num-seqs many", "invalid"),
])
def test_launch_vllm_refuses_is_one_line(tmp_path, args, said):
    out = tmp_path / "f.json"
    done = run_cli("trace", "--vllm-args", args, "--device", "sm90", "--mode", "map", "--json", str(out))
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("graphbreak-doctor: error:")]
    assert "vLLM 0.33.0 refuses them" in line and said in line, line
    assert "Traceback" not in done.stderr and not out.exists()


def test_a_backend_vllm_refuses_on_the_device_is_its_own_check_exit_2(tmp_path):
    """FlashMLA's dense attention on an RTX PRO 6000: vLLM's backend selection
    refuses it while the model is built, as the server does at start-up."""
    out = tmp_path / "f.json"
    done = run_cli("trace", "--vllm-args", "deepseek-v3 --attention-backend FLASHMLA", "--device", "sm120",
                   "--mode", "map", "--json", str(out), "--no-html")
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("graphbreak-doctor: error:")]
    assert "refuses this launch on the emulated NVIDIA RTX PRO 6000" in line, line
    assert "FlashMLA Dense is only supported on Hopper devices" in line, line
    assert re.search(r"\(its check at vllm/platforms/\w+\.py:\d+ in \w+\)$", line), line
    assert "Traceback" not in done.stderr and not out.exists()


def test_vllms_refusal_crosses_the_worker_as_its_own_message():
    """A worker's refused launch comes back with vLLM's own message beside
    the line (what a matrix cell shows), not read back from the line."""
    from graphbreak_doctor.jobs import run_jobs
    from graphbreak_doctor.jobs.job import MAP, Job
    from graphbreak_doctor.targets.serving import PROVIDER

    (selection,) = PROVIDER.select({"vllm_args": "qwen3-30b-a3b --no-such-option 3"})
    (outcome,) = run_jobs([Job(MAP, selection, "sm90", "map")], timeout=600, parallel=1)
    assert outcome.usage and outcome.findings is None, outcome.message
    assert "unrecognized arguments: --no-such-option" in outcome.refused, outcome.refused
    assert outcome.message.endswith(outcome.refused) and "refuses them" in outcome.message


# vLLM compiling the profile run itself (its own backend, eager pieces, no
# CUDA graphs: nothing that needs the device's compiler), inside the emulated
# H100 as the doctor builds the model; prints the code objects Dynamo's own
# compilation metrics record. It leaves with os._exit: vLLM's exit handlers
# would run after the emulation is undone.
DYNAMO_RECORD = textwrap.dedent("""
    import json, os
    import torch
    from graphbreak_doctor.diagnose import inside_device
    from graphbreak_doctor.emulation import standins
    from graphbreak_doctor.targets.frameworks import registry
    from graphbreak_doctor.targets.frameworks.vllm import emulation, launch
    from graphbreak_doctor.targets.frameworks.vllm import model as vllm_model
    from graphbreak_doctor.targets.models.packaged import config_dir

    with inside_device("sm90") as (dev, log):
        installed = registry.install_stand_ins(log)
        emulation.isolate_caches(log, emulation.scratch(log))
        emulation.aot_compile_off(log)
        emulation.accelerator_streams(log)
        emulation.install_platform(log)
        emulation.inspect_in_process(log)
        config, said = launch.resolve(("-cc.backend=eager", "-cc.cudagraph_mode=NONE"),
                                      str(config_dir("qwen3-30b-a3b")))
        standins.register_missing_fakes(installed)
        built = vllm_model.build(config, log)
        vllm_model.run(built, config, 64)
        compiled = sorted({(m.co_filename, m.co_firstlineno) for m in torch._dynamo.utils.get_compilation_metrics()})
        print(json.dumps(compiled), flush=True)
    os._exit(0)
""")


def test_map_regions_are_what_dynamo_compiles(traces, tmp_path):
    """The regions the map lists as entered are the code objects Dynamo
    compiles when vLLM itself compiles the same profile run."""
    script = tmp_path / "dynamo_record.py"
    script.write_text(DYNAMO_RECORD)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = {tuple(x) for x in json.loads(done.stdout.strip().splitlines()[-1])}
    traced = traces.get(*QWEN3)
    assert traced.code == 0, traced.stderr[-2000:]
    entered = {(r.site.file, r.site.line) for r in traced.findings.regions if r.entered}
    assert entered and {(_short(f), line) for f, line in compiled} == {(_short(f), line) for f, line in entered}


def _short(path: str) -> str:
    return path[path.index("vllm/"):] if "vllm/" in path else path


def _plugin(tmp_path, arch: str) -> tuple[dict, str]:
    """The tests' own model class registered with vLLM as a user does: a
    general plugin (an installed distribution's entry point) and a config
    folder naming its architecture."""
    info = tmp_path / "plugin" / "gbd_vllm_test_plugin-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gbd-vllm-test-plugin\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\ngbd = fixtures.vllm_models:register\n")
    from graphbreak_doctor.targets.models.packaged import config_dir

    config = json.loads((config_dir("qwen3-30b-a3b") / "config.json").read_text())
    folder = tmp_path / arch
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**config, "architectures": [arch]}))
    return {"PYTHONPATH": f"{tmp_path / 'plugin'}:{ROOT}"}, str(folder)


def test_break_in_a_model_local_helper_fails_fullgraph(tmp_path):
    """A break in a model-local helper of the tests' own model class: the
    decorated forward's fullgraph verdict fails, as vLLM's startup would,
    naming the helper's line, its category and fix; the fixed class is OK."""
    from fixtures import vllm_models

    env, folder = _plugin(tmp_path, vllm_models.ARCH)
    out = tmp_path / "f.json"
    done = run_cli("trace", "--vllm-args", folder, "--device", "sm90", "--mode", "map", "--json", str(out),
                   "--no-html", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (region,) = [r for r in json.loads(out.read_text())["regions"] if r["calls"]]
    assert region["function"] == "fixtures.vllm_models.GbdQwen3MoeModel.forward"
    assert region["verdict"] == "fails" and region["options"]["fullgraph"] is True
    (found,) = region["breaks"]
    assert found["category"] == "filesystem" and found["fix"]["recipe"] == "hoist-filesystem"
    assert found["actionable_frame"]["function"] == "tuned_scale"
    assert found["actionable_frame"]["code"] == "scale = 2.0 if os.path.exists(TUNING) else 1.0"
    assert "its first break stops the server" in done.stdout

    env, folder = _plugin(tmp_path / "fixed", vllm_models.FIXED_ARCH)
    done = run_cli("trace", "--vllm-args", folder, "--device", "sm90", "--mode", "map", "--json", str(out),
                   "--no-html", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (region,) = [r for r in json.loads(out.read_text())["regions"] if r["calls"]]
    assert region["verdict"] == "ok" and not region["breaks"]

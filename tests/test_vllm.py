"""vLLM as a framework (--vllm-args): its launch resolved by the installed
vLLM, its model built by its own loader, its compiled forward traced as vLLM
compiles it. Runs in the vLLM environment (make test-vllm); each trace once
(the shared traces, tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import json
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
    from graphbreak_doctor.targets.frameworks.vllm import emulation, launch
    from graphbreak_doctor.targets.models.packaged import config_dir

    out = []
    with inside_device("sm90") as (dev, log):
        installed = standins.install(log)
        emulation.isolate_caches(log, emulation.scratch(log))
        with emulation.building():
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
        assert "nothing in this launch is compiled with fullgraph=True" in done.stdout
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

"""A tensor-parallel SGLang launch traced as one rank of the real world
(`--sglang-args "--tp 8"`): SGLang's own set-up runs with a world of 8 over
torch's fake process group (emulation/world.py), its loader sizes each
tensor for rank 0, and the findings say the layout and the rank's shards.
The shard sizes expected here are worked out from GLM-5's config.json, not
read back from a run. Runs in the SGLang environment (`make test-sglang`)."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT

from graphbreak_doctor.targets.models.glm5.served import default_folder

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")]

TP = 8
_tp8_weights: list[int] = []


def _run(cli, *args: str, model: str = "glm5-nvfp4", device: str = "sm120", env: dict | None = None):
    out = Path(tempfile.mkdtemp()) / "findings.json"
    result = cli("trace", "--model", "--model-path", model, "--device", device, "--mode", "map", *args,
                 "--json", str(out), "--no-html", "--in-process", env=env)
    return result, (json.loads(out.read_text()) if out.exists() else None), out


# The public recipe's line for GLM-5-NVFP4 on 8x RTX PRO 6000, as SGLang 0.5.23
# takes it: its own decode-size option, and its DSA attention (FlashInfer's
# SM120 sparse MLA, the indexer on DeepGEMM) where the recipe, written for an
# older release, asked for Triton's MLA attention (see the next test).
RTX_PRO_6000_LINE = ("--tp 8 --ep-size 1 --disable-shared-experts-fusion --chunked-prefill-size 8192 "
                     "--mem-fraction-static 0.85 --cuda-graph-max-bs-decode 64")


@pytest.mark.slow
def test_glm5_recipe_line_on_8_rtx_pro_6000_maps_as_rank_0_of_8_with_its_own_shards(cli):
    result, findings, _ = _run(cli, "--sglang-args", RTX_PRO_6000_LINE)
    assert result.returncode == 0 and findings is not None, result.stderr[-3000:]
    facts = findings["target"]["facts"]
    assert facts["launch"]["layout"] == {"tp": TP, "pp": 1, "ep": 1, "dp": 1, "world_size": TP, "rank": 0}
    resolved = facts["launch"]["resolved"]
    assert (resolved["attention_backend"], resolved["kv_cache_dtype"]) == ("dsa", "fp8_e4m3"), resolved
    assert findings["target"]["shapes"]["tp"] == TP
    config = json.loads((Path(default_folder()) / "config.json").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    dense, moe = facts["shards"]["dense"], facts["shards"]["moe"]
    # Attention: 8 of the 64 heads on each rank.
    for layer in (dense, moe):
        assert layer["attention_heads"] == heads // TP == 8
        assert layer["tensors"]["self_attn.q_b_proj.weight"]["shape"][0] == heads // TP * head_dim
    # The dense MLP, NVFP4 (two values a byte): gate and up column-split, down row-split.
    t = dense["tensors"]
    assert t["mlp.gate_up_proj.weight"]["shape"] == [2 * config["intermediate_size"] // TP, hidden // 2]
    assert t["mlp.down_proj.weight"]["shape"] == [hidden, config["intermediate_size"] // TP // 2]
    assert t["mlp.gate_up_proj.weight"]["dtype"] == "uint8"
    # The MoE: every expert on every rank (no expert parallelism), each sliced by TP.
    t = moe["tensors"]
    experts, w13_rows, w13_cols = t["mlp.experts.w13_weight"]["shape"]
    assert experts == config["n_routed_experts"]  # --disable-shared-experts-fusion: the routed ones only
    assert [w13_rows, w13_cols] == [2 * config["moe_intermediate_size"] // TP, hidden // 2]
    assert t["mlp.experts.w2_weight"]["shape"][1:] == [hidden, config["moe_intermediate_size"] // TP // 2]
    found = findings["cudagraphs"]
    assert found["error"] == "" and {p["phase"] for p in found["phases"]} == {"decode", "prefill"}
    # Does it fit: this rank's weights for all 78 layers on a 96 GB RTX PRO 6000,
    # with what SGLang's static fraction leaves for the KV cache.
    memory = facts["memory"]
    assert memory["layers"] == {"dense": config["first_k_dense_replace"],
                                "moe": config["num_hidden_layers"] - config["first_k_dense_replace"]}
    assert memory["weights_bytes"] == memory["outside_layers_bytes"] + sum(
        memory["layer_bytes"][kind] * n for kind, n in memory["layers"].items())
    assert memory["fits"] and memory["fraction"] == 0.85
    assert memory["kv_cache_bytes"] == int(0.85 * memory["device_memory_bytes"]) - memory["weights_bytes"] > 0
    assert any(note.startswith("memory (rank 0 of 8): fits: ") for note in findings["target"]["notes"])
    _tp8_weights.append(memory["weights_bytes"])
    # The communicators SGLang chose for the node's topology: eight PCIe GPUs,
    # no NVLink (NVML's answers), so SGLang declines its custom all-reduce
    # in its own words.
    talk = facts["launch"]["communicators"]
    (tp,) = [g for g in talk["groups"] if g["group"].startswith("tp")]
    assert tp["ranks"] == TP and "CustomAllreduce" in tp["disabled"] and "CustomAllreduce" not in tp["enabled"]
    assert any("not supported on more than two PCIe-only GPUs" in line for line in talk["said"]), talk
    assert any(note.startswith(f"communicators (rank 0 of 8): {tp['group']} (8 ranks): ")
               for note in findings["target"]["notes"])
    layers = facts["layers_built"]
    # The sizes the launch captures: decode up to its 64, prefill up to its chunk of 8192.
    sizes = {p["phase"]: p["sizes"] for p in found["phases"]}
    assert max(sizes["decode"]) == 64 and max(sizes["prefill"]) == 8192, sizes
    for phase in found["phases"]:
        assert phase["captures"] and all(c["error"] == "" for c in phase["captures"]), phase["captures"]
        for capture in phase["captures"]:
            # SGLang's all-reduce, as its group coordinator runs it: after the
            # vocab-parallel embedding, then after the attention and after
            # the MLP (or MoE) of each decoder layer.
            reduced = [c for c in capture["collectives"] if c["op"] == "sglang::inplace_all_reduce"]
            assert sum(c["count"] for c in reduced) == 1 + 2 * layers, capture["collectives"]
            assert {c["site"]["qualname"] for c in reduced} == {"GroupCoordinator.all_reduce"}
            # Run by the communicator SGLang readies for graphs here (no custom
            # all-reduce over PCIe): PyNccl, over the emulated NCCL library.
            assert _communicator_calls(capture, "sglang::inplace_all_reduce") == {
                "nccl::ncclAllReduce": 1 + 2 * layers}, capture["collectives"]


@pytest.mark.slow
def test_glm5_at_tp4_does_not_fit_on_96_gb_gpus(cli):
    """GLM-5-NVFP4's weights over four RTX PRO 6000s: more than one GPU holds."""
    result, findings, _ = _run(cli, "--sglang-args", "--tp 4")
    assert result.returncode in (0, 1) and findings is not None, result.stderr[-3000:]
    memory = findings["target"]["facts"]["memory"]
    assert not memory["fits"] and memory["weights_bytes"] > memory["device_memory_bytes"]
    assert memory["text"].startswith("does not fit: ")
    if _tp8_weights:  # half the ranks: nearly twice the bytes each (what every rank holds whole aside)
        assert 1.8 * _tp8_weights[0] < memory["weights_bytes"] < 2 * _tp8_weights[0]


def _reductions(capture: dict) -> dict[str, int]:
    """SGLang's own all-reduce operators (not what they run inside: "via")."""
    out: dict[str, int] = {}
    for c in capture["collectives"]:
        if not c["via"] and ("all_reduce" in c["op"] or "allreduce" in c["op"]):
            out[c["op"]] = out.get(c["op"], 0) + c["count"]
    return out


def _communicator_calls(capture: dict, via: str) -> dict[str, int]:
    """What SGLang's operator ``via`` ran: its communicator's collectives."""
    out: dict[str, int] = {}
    for c in capture["collectives"]:
        if c["via"] == via:
            out[c["op"]] = out.get(c["op"], 0) + c["count"]
    return out


# SGLang's own switch to its IPC custom all-reduce (the one its releases
# before the symmetric-memory communicator use): the doctor stands that one in.
_CUSTOM_AR = {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "0"}


@pytest.mark.slow
def test_deepseek_v3_at_tp8_on_h200_fuses_the_all_reduce_with_the_norm_where_sglang_does(cli):
    """On Hopper SGLang hands the all-reduce and the next RMSNorm to
    FlashInfer's fused kernel up to its token limit, and to the plain
    all-reduce above it: the map names each, as many times as the layers
    need one (after the embedding, after each attention, after each MLP)."""
    result, findings, _ = _run(cli, "--sglang-args", f"--tp {TP}", model="deepseek-v3", device="h200", env=_CUSTOM_AR)
    assert result.returncode in (0, 1) and findings is not None, result.stderr[-3000:]
    facts = findings["target"]["facts"]
    config = json.loads((ROOT / "graphbreak_doctor/targets/models/deepseek_v3/configs/config.json").read_text())
    assert facts["launch"]["layout"]["world_size"] == TP
    assert facts["shards"]["dense"]["attention_heads"] == config["num_attention_heads"] // TP
    # An HGX H200 board: NVLink between every pair, so nothing is declined
    # for the topology.
    talk = facts["launch"]["communicators"]
    assert talk["groups"] and not any("PCIe-only" in line for line in talk["said"]), talk
    layers = facts["layers_built"]
    found = findings["cudagraphs"]
    for phase in found["phases"]:
        assert phase["captures"] and all(c["error"] == "" for c in phase["captures"]), phase["captures"]
        for capture in phase["captures"]:
            reductions = _reductions(capture)
            assert sum(reductions.values()) == 1 + 2 * layers, capture["collectives"]
    smallest = found["phases"][0]["captures"][0]
    assert _reductions(smallest).get("sglang::flashinfer_allreduce_residual_rmsnorm", 0) > 0, smallest
    # The plain all-reduce runs SGLang's custom all-reduce (NVLink between
    # every pair: its choice), inside the process groups' capture context,
    # which registers the buffers its graphs read: no hazard.
    assert _communicator_calls(smallest, "sglang::outplace_all_reduce") == {
        "sgl_kernel::all_reduce": _reductions(smallest)["sglang::outplace_all_reduce"]}, smallest["collectives"]
    assert not [h for p in found["phases"] for c in p["captures"] for h in c["hazards"]
                if h["category"] == "cudagraph-unregistered-buffer"]


@pytest.mark.slow
def test_a_custom_all_reduce_captured_outside_the_capture_context_is_a_hazard(cli):
    """A runner that captures without the process groups' capture context
    (fixtures/without_capture_context): the custom all-reduce's graph
    buffers are never registered with the peers, so each capture holding one
    reports it, at the all-reduce, with the fix."""
    env = {**_CUSTOM_AR, "PYTHONPATH": str(ROOT / "fixtures" / "without_capture_context")}
    result, findings, _ = _run(cli, "--sglang-args", f"--tp {TP}", model="deepseek-v3", device="h200", env=env)
    assert result.returncode in (0, 1) and findings is not None, result.stderr[-3000:]
    captures = [c for p in findings["cudagraphs"]["phases"] for c in p["captures"]]
    assert captures and all(c["error"] == "" for c in captures), captures
    for capture in captures:
        custom = _communicator_calls(capture, "sglang::outplace_all_reduce").get("sgl_kernel::all_reduce", 0)
        unregistered = [h for h in capture["hazards"] if h["category"] == "cudagraph-unregistered-buffer"]
        # Each capture that ran the custom all-reduce owes one registration per call.
        assert sum(h["count"] for h in unregistered) == custom, (capture["size"], capture["collectives"])
        for hazard in unregistered:
            assert "register_graph_buffers" in hazard["what"] and hazard["fix"] == "capture-in-communicator-context"
            assert any("custom_all_reduce" in f["file"] for f in hazard["stack"]), hazard["stack"]
    assert any(_communicator_calls(c, "sglang::outplace_all_reduce") for c in captures)


@pytest.mark.slow
def test_the_recipe_line_with_tritons_mla_attention_stops_in_sglangs_own_code(cli):
    """With ``--attention-backend triton`` SGLang 0.5.23 gives GLM-5 on SM120
    its FP8 DSA KV pool (its default from SM100 on), whose plain MLA write
    asserts it is not one: the real server stops there at its first forward.
    One line, SGLang's own check and where it is, exit 2, nothing written."""
    result, findings, out = _run(cli, "--sglang-args", RTX_PRO_6000_LINE + " --attention-backend triton")
    assert result.returncode == 2 and findings is None and not out.exists(), result.stderr[-2000:]
    said = [line for line in result.stderr.splitlines() if line.startswith("graphbreak-doctor:")]
    assert len(said) == 1, result.stderr[-2000:]
    assert "dsa_kv_cache_store_fp8" in said[0] and "memory_pool.py:" in said[0], said


def test_tp7_is_sglangs_own_refusal_in_one_line(cli):
    result, findings, out = _run(cli, "--sglang-args", "--tp 7")
    assert result.returncode == 2 and findings is None and not out.exists()
    said = [line for line in result.stderr.splitlines() if line.startswith("graphbreak-doctor:")]
    assert len(said) == 1, result.stderr[-2000:]
    assert "assert num_heads % attn_tp_size == 0" in said[0] and "deepseek_v2.py:" in said[0], said


@pytest.mark.slow
def test_fix_runs_its_ladder_at_the_launchs_layout(cli):
    """``fix`` takes the same layout: every trace of its ladder is rank 0 of 8
    at this rank's shapes. What a world of one never reaches is then the
    first failure: SGLang 0.5.23's all-reduce asks a parallel-state getter
    whose deprecation wrapper reads its caller's frame (``sys._getframe``)."""
    out = Path(tempfile.mkdtemp()) / "fix.json"
    result = cli("fix", "--model", "--model-path", "glm5-nvfp4", "--device", "sm120", "--sglang-args", f"--tp {TP}",
                 "--steps", "2", "--json", str(out), "--no-html", "--in-process")
    assert result.returncode in (0, 1) and out.exists(), result.stderr[-3000:]
    findings = json.loads(out.read_text())
    assert findings["target"]["facts"]["launch"]["layout"]["world_size"] == TP
    assert findings["target"]["shapes"]["tp"] == TP
    first = next(b for b in findings["breaks"] if b["id"] == findings["fullgraph"]["break_id"])
    assert [f["function"] for f in first["stack"]][-2:] == ["tensor_model_parallel_all_reduce", "wrapper"], first
    assert "_getframe" in first["reason"], first["reason"]

"""A tensor-parallel vLLM launch traced as one rank of the real world
(`--vllm-args "--tensor-parallel-size 4"`): vLLM's own process-group set-up
runs with a world of 4 over torch's fake process group (emulation/world.py),
its loader sizes each tensor for rank 0, and the CUDA-graph map lists vLLM's
own all-reduce where its captures run it. The shard sizes expected here are
worked out from Qwen3-30B-A3B's config.json. Runs in the vLLM environment
(`make test-vllm`)."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT

HAS_VLLM = importlib.util.find_spec("vllm") is not None
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed")]

TP = 4
CONFIG = ROOT / "graphbreak_doctor/targets/models/qwen3_moe/configs/config.json"


@pytest.mark.slow
def test_qwen3_moe_at_tp4_maps_on_h100_as_rank_0_of_4(cli):
    out = Path(tempfile.mkdtemp()) / "findings.json"
    result = cli("trace", "--model-path", "qwen3-30b-a3b", "--device", "sm90", "--mode", "map",
                 "--vllm-args", f"--tensor-parallel-size {TP}", "--json", str(out), "--no-html", "--in-process")
    assert result.returncode in (0, 1) and out.exists(), result.stderr[-3000:]
    findings = json.loads(out.read_text())
    facts = findings["target"]["facts"]
    assert facts["launch"]["layout"] == {"tp": TP, "pp": 1, "ep": 1, "dp": 1, "world_size": TP, "rank": 0}
    config = json.loads(CONFIG.read_text())
    (moe,) = facts["shards"].values()
    head_dim, hidden = config["head_dim"], config["hidden_size"]
    heads, kv_heads = config["num_attention_heads"] // TP, config["num_key_value_heads"] // TP
    assert moe["attention_heads"] == heads
    t = moe["tensors"]
    # Attention: the query heads and the key/value heads of this rank, fused.
    assert t["self_attn.qkv_proj.weight"]["shape"] == [(heads + 2 * kv_heads) * head_dim, hidden]
    assert t["self_attn.o_proj.weight"]["shape"] == [hidden, heads * head_dim]
    # Every expert on every rank (no expert parallelism), each sliced by TP.
    experts = {name.rsplit(".", 1)[1]: entry["shape"] for name, entry in t.items() if ".experts." in name}
    assert experts["w13_weight"] == [config["num_experts"], 2 * config["moe_intermediate_size"] // TP, hidden]
    assert experts["w2_weight"] == [config["num_experts"], hidden, config["moe_intermediate_size"] // TP]
    memory = facts["memory"]
    assert memory["layers"] == {"moe": config["num_hidden_layers"]}
    assert memory["weights_bytes"] == memory["outside_layers_bytes"] + memory["layer_bytes"]["moe"] * config[
        "num_hidden_layers"]
    assert memory["fits"] and memory["fraction_option"] == "--gpu-memory-utilization"
    layers = facts["layers_built"]
    found = findings["cudagraphs"]
    assert found["error"] == "" and found["phases"]
    for phase in found["phases"]:
        for capture in phase["captures"]:
            assert capture["error"] == "", capture
            # vLLM's all-reduce: after the vocab-parallel embedding, after each attention and each MoE.
            reduced = sum(c["count"] for c in capture["collectives"] if c["op"] == "vllm::all_reduce")
            assert reduced == 1 + 2 * layers, capture["collectives"]
            # Each runs the communicator vLLM chose for an HGX H100 board (NVLink
            # between every pair, as NVML answers): its custom all-reduce, inside
            # vLLM's capture context, which registers the buffers: no hazard.
            ran = {c["op"]: c["count"] for c in capture["collectives"] if c["via"] == "vllm::all_reduce"}
            assert ran == {"_C_custom_ar::all_reduce": 1 + 2 * layers}, capture["collectives"]
            assert not capture["hazards"], capture["hazards"]
    # The communicators vLLM set up for its tensor-parallel group, and what it said.
    talk = facts["launch"]["communicators"]
    (tp,) = [g for g in talk["groups"] if g["group"].startswith("tp")]
    assert tp["ranks"] == TP and {"CustomAllreduce", "PyNcclCommunicator"} <= set(tp["enabled"]), talk
    assert any("nccl==2.27.3" in line for line in talk["said"]), talk["said"]
    assert any("'CUSTOM', 'PYNCCL'] all-reduce backends" in line and "tp:0" in line for line in talk["said"]), talk
    assert any(note.startswith(f"communicators (rank 0 of {TP}): ") for note in findings["target"]["notes"])
    # The compile map: vLLM compiles the whole forward and cuts it only at its
    # attention, so each all-reduce is an operator inside a compiled graph.
    (region,) = [r for r in findings["regions"] if r["calls"] and r["function"].endswith("Model.forward")]
    assert region["collectives"] == [{"op": "vllm::all_reduce", "count": 1 + 2 * layers, "as": "graph op"}], region

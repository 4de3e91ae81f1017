"""`trace --sizes` and `check --sizes`: the target compiled once and called
at each size in order, as a server calls it.

Real runs: Dynamo compiles a layer fed ten input ranks eight times and then
stops (its recompile limit); the doctor says where, with Dynamo's own
reason, and the fix that fits. The claim about fullgraph is held against
Dynamo itself: a plain `torch.compile(fullgraph=True)` of the same layer, in
a fresh interpreter, fails at the same call.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch._dynamo.testing

from conftest import ROOT, run_cli

RANKS = ",".join("x".join(["2"] * r) for r in range(1, 11))  # 2, 2x2, ..., ten 2s


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("sizes") / "ranks.json"
    done = run_cli("trace", "--target", "fixtures.ranks:target", "--device", "cpu", "--sizes", RANKS,
                   "--json", str(out), "--no-html")
    assert done.returncode == 0, done.stderr[-2000:]
    return done, json.loads(out.read_text())


def test_ten_ranks_hit_the_recompile_limit_with_dynamos_reason_and_a_fix(ranks):
    done, findings = ranks
    sized = findings["sized"]
    assert sized["recompile_limit"] == 8
    calls = sized["calls"]
    assert [c["size"] for c in calls] == RANKS.split(",")
    assert [c["compiles"] for c in calls] == [1] * 8 + [0, 0]
    hit = [i for i, c in enumerate(calls) if c["limit_hit"]]
    assert hit == [8], hit  # the ninth rank: eight graphs exist
    # Dynamo's own guard failure, word for word.
    assert calls[1]["reasons"] == ["layer: 0/0: tensor 'x' rank mismatch. expected 1, actual 2"]
    assert calls[8]["reasons"] == ["layer: 0/7: tensor 'x' rank mismatch. expected 8, actual 9"]
    assert sized["verdict"].startswith("recompile limit hit at size 2x2x2x2x2x2x2x2x2:")
    assert "FailOnRecompileLimitHit" in sized["verdict"]
    assert sized["fix"] == "eager-flatten"
    assert "sizes: 10 sizes, 8 compiles (7 recompiles; Dynamo's limit: 8): FAILS" in done.stdout
    assert "fix: eager-flatten: Flatten in an eager wrapper" in done.stdout
    # Rank 1 takes every rank this element-wise layer was fed; the wrapper it
    # names gives one graph and eager's outputs.
    assert "compiled(x.reshape(-1)).reshape(x.shape)" in sized["fix_text"]
    from fixtures.ranks import layer

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(layer, fullgraph=True, backend=counter)
    for rank in range(0, 10):
        x = torch.randn((2,) * rank)
        torch.testing.assert_close(compiled(x.reshape(-1)).reshape(x.shape), layer(x))
    assert counter.frame_count <= 2  # the first size, then one dynamic dimension
    torch._dynamo.reset()


PLAIN = """
import torch
from fixtures.ranks import layer
compiled = torch.compile(layer, fullgraph=True, backend="eager")
for rank in range(1, 11):
    try:
        compiled(torch.ones((2,) * rank))
    except torch._dynamo.exc.FailOnRecompileLimitHit as e:
        print(f"rank {rank}: {type(e).__name__}: {e}")
        break
"""


def test_a_plain_fullgraph_compile_fails_at_the_call_the_doctor_names(ranks):
    _done, findings = ranks
    hit = next(i for i, c in enumerate(findings["sized"]["calls"]) if c["limit_hit"])
    plain = subprocess.run([sys.executable, "-c", PLAIN], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert f"rank {hit + 1}: FailOnRecompileLimitHit: Hard failure due to fullgraph=True" in plain.stdout, plain.stdout


def test_check_fails_on_the_limit_and_passes_where_one_graph_covers_the_sizes(tmp_path):
    sar = tmp_path / "gate.sarif"
    failed = run_cli("check", "--target", "fixtures.ranks:target", "--device", "cpu", "--sizes", RANKS,
                     "--sarif", str(sar))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "[sizes, cpu]: FAILED" in failed.stdout and "recompile-limit: recompile limit hit" in failed.stdout
    # SARIF says the hit too: it has no line, so it is a notification of the
    # run (code scanning refuses a result without a location).
    (run,) = json.loads(sar.read_text())["runs"]
    (note,) = [n for n in run["invocations"][0]["toolExecutionNotifications"] if "recompile limit hit" in n["message"]["text"]]
    assert note["level"] == "error" and "Fix: " in note["message"]["text"]
    # One rank at three sizes: the second size compiles again with a dynamic
    # dimension (Dynamo's automatic dynamic shapes), the third reuses it.
    passed = run_cli("check", "--target", "fixtures.ranks:target", "--device", "cpu", "--sizes", "4,8,16")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "[sizes, cpu]: passed" in passed.stdout


def test_one_rank_at_several_sizes_recompiles_once_and_suggests_a_dynamic_dimension(tmp_path):
    out = tmp_path / "one.json"
    done = run_cli("trace", "--target", "fixtures.ranks:target", "--device", "cpu", "--sizes", "4,8,16",
                   "--json", str(out), "--no-html")
    assert done.returncode == 0, done.stderr[-2000:]
    sized = json.loads(out.read_text())["sized"]
    assert [c["compiles"] for c in sized["calls"]] == [1, 1, 0]
    assert sized["calls"][1]["reasons"] == ["layer: 0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8"]
    assert not sized["verdict"] and sized["fix"] == "mark-dynamic"
    assert "torch._dynamo.mark_dynamic(x, 0)" in sized["fix_text"]


@pytest.mark.parametrize("args, said", [
    (["--target", "fixtures.ranks:target", "--sizes", "4,0"], "'0' is not a size"),
    (["--target", "fixtures.ranks:target", "--sizes", "4x"], "'4x' is not a size"),
    (["--layer", "dense", "--sizes", "4x4"], "takes whole numbers (tokens in the batch), not shapes"),
    (["--target", "fixtures.breaks.clean:target", "--sizes", "4"], "got an unexpected keyword argument 'size'"),
])
def test_bad_sizes_are_one_line_and_exit_2(args, said, tmp_path):
    done = run_cli("trace", *args, "--device", "cpu", "--json", str(tmp_path / "x.json"), "--no-html")
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "x.json").exists()

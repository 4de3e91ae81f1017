"""The emulated world (emulation/world.py): the traced rank of N ranks over
torch's fake process group. Every group any code asks for is fake, object
collectives leave this rank's objects, nothing waits on a peer, leaving the
undo log puts torch.distributed back, a node check answers from the node
size (not from a sum over peers); and a CUDA-graph capture inside such a
world lists the collectives its segments ran (fixtures/tensor_parallel.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch.distributed as dist

from conftest import ROOT
from graphbreak_doctor.emulation import world
from graphbreak_doctor.patching import UndoLog

# In a fresh interpreter, under a timeout: a collective or a group that
# waited on a peer process would hang here, and the test fails.
_PEERLESS = r"""
import torch, torch.distributed as dist
from graphbreak_doctor.emulation import world
from graphbreak_doctor.patching import UndoLog
with UndoLog() as log:
    here = world.join(log, 8, 3)
    gloo = dist.new_group(list(range(8)), backend="gloo")
    nccl = dist.new_group([0, 1, 2, 3], backend="nccl")
    t = torch.arange(4.0)
    dist.all_reduce(t, group=nccl)
    dist.barrier(group=gloo)
    objects = [{"rank": 3}]
    dist.broadcast_object_list(objects, src=0, group=gloo)
    gathered = [None] * 8
    dist.all_gather_object(gathered, "mine")
    print(here, dist.get_backend(gloo), dist.get_backend(nccl), dist.get_rank(nccl), t.tolist(), objects, gathered.count("mine"))
print("after", dist.is_initialized())
"""


def test_a_rank_of_eight_never_waits_and_every_group_is_fake():
    done = subprocess.run([sys.executable, "-c", _PEERLESS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "World(size=8, rank=3) fake fake 3 [0.0, 1.0, 2.0, 3.0] [{'rank': 3}] 8", lines
    assert lines[-1] == "after False"


def test_leaving_the_log_puts_torch_distributed_back():
    real = dist.new_group, dist.broadcast_object_list
    with UndoLog() as log:
        assert world.join(log, 4, 1) == world.World(4, 1) and world.joined() == world.World(4, 1)
        with pytest.raises(ValueError, match="already belongs"):
            world.join(log, 2, 0)
    assert not dist.is_initialized() and world.joined() is None
    assert (dist.new_group, dist.broadcast_object_list) == real
    with UndoLog() as log, pytest.raises(ValueError, match="rank 8 is not in a world of 8"):
        world.join(log, 8, 8)


@pytest.mark.parametrize("name, ops", [
    ("in_place", ["c10d::allreduce_"]),
    # A functional collective is waited on by an operator of its own.
    ("functional", ["_c10d_functional::all_reduce", "_c10d_functional::wait_tensor"])])
def test_a_capture_inside_the_world_lists_its_collectives(name, ops):
    from graphbreak_doctor.diagnose import target_builder, trace_cudagraphs
    from graphbreak_doctor.render.cudagraph import capture_line

    with UndoLog() as log:
        world.join(log, 8, 0)
        findings = trace_cudagraphs(target_builder(f"fixtures.tensor_parallel:{name}"), device="sm120")
    (phase,) = findings.cudagraphs.phases
    (capture,) = phase.captures
    assert capture.error == "" and capture.hazards == []
    assert [(c.op, c.count, c.segment) for c in capture.collectives] == [(op, 1, 1) for op in ops]
    assert f"collectives: {ops[0]} x1" in capture_line(capture)


def test_a_declared_collective_counts_until_the_log_is_left():
    import torch

    op = torch.ops.aten.add.Tensor
    with UndoLog() as log:
        world.declare_collectives(log, {"aten::add.Tensor": ("here.py", "")})
        assert world.is_collective(op) and world.files_of(op) == ("here.py", "")
    assert not world.is_collective(op) and world.files_of(op) == ("", "")
    assert world.is_collective(torch.ops.c10d.allreduce_.default)


def test_a_node_check_answers_from_the_nodes_size():
    # A framework asks which ranks share a node by summing one-hot flags over
    # the group; a fake all-reduce sums nothing, so the world answers it.
    import types

    def in_the_same_node_as(group, source_rank=0):
        raise AssertionError("the framework's own check ran")

    holder = types.ModuleType("a_framework_parallel_state")
    holder.in_the_same_node_as = in_the_same_node_as
    sys.modules[holder.__name__] = holder
    try:
        with UndoLog() as log:
            world.join(log, 16, 0, node_gpus=8)
            world.answer_node_check(log, in_the_same_node_as)
            assert holder.in_the_same_node_as(dist.group.WORLD) == [True] * 8 + [False] * 8
            second = dist.new_group(list(range(8, 16)))
            assert world.same_node(second) == [True] * 8
            across = dist.new_group([6, 7, 8, 9])
            assert world.same_node(across, source_rank=0) == [True, True, False, False]
        assert holder.in_the_same_node_as is in_the_same_node_as
    finally:
        del sys.modules[holder.__name__]


@pytest.mark.parametrize("name", ["in_place", "functional"])
def test_a_traced_graph_lists_the_collectives_it_calls(name):
    # Dynamo turns an in-place torch.distributed.all_reduce into the
    # functional collective and its wait, as it does the functional one.
    ops = ["_c10d_functional::all_reduce", "_c10d_functional::wait_tensor"]
    from graphbreak_doctor.diagnose import target_builder, trace_mode

    with UndoLog() as log:
        world.join(log, 8, 0)
        findings = trace_mode(target_builder(f"fixtures.tensor_parallel:{name}"), "explain", device="sm120", cold=True)
    assert [g.collectives for g in findings.graphs if g.collectives] == [ops], [g.op_names for g in findings.graphs]

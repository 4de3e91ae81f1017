"""The custom all-reduce library stood in (emulation/standins/custom_all_reduce.py)
under the CUDA-graph recorder: an all-reduce captured in a segment owes the
registration of its buffer with the peers; the library's own registration
call after the capture settles it, and what is still owed when the capture
phase ends is a `cudagraph-unregistered-buffer` hazard at the frame that ran
it. Also the NCCL library stood in for a framework's own ctypes wrapper."""

from __future__ import annotations

import ctypes

import pytest
import torch

from graphbreak_doctor.cudagraph.recorder import UNREGISTERED, Session
from graphbreak_doctor.emulation.device import EmulatedDevice
from graphbreak_doctor.emulation import world
from graphbreak_doctor.emulation.standins import custom_all_reduce, nccl
from graphbreak_doctor.emulation.standins.binaries import StandIns
from graphbreak_doctor.patching import UndoLog

NAMESPACE = "graphbreak_doctor_test_custom_ar"


def _reduce(ops, handle, x):
    out = torch.empty_like(x)
    ops.all_reduce(handle, x, out, 0, 0)
    return out


@pytest.mark.parametrize("registered", [True, False])
def test_a_captured_all_reduce_owes_its_registration_until_the_library_registers(registered):
    with UndoLog() as log, EmulatedDevice("sm100"):
        out = StandIns()
        custom_all_reduce.install(log, out, NAMESPACE)
        world.join(log, 8, 0, node_gpus=8)
        ops = getattr(torch.ops, NAMESPACE)
        handle = ops.init_custom_ar([0] * 8, torch.empty(64, dtype=torch.uint8, device="cuda"), 0, True)
        assert ops.meta_size() == custom_all_reduce.META_SIZE
        session = Session(log)
        x = torch.empty(16, 64, device="cuda", dtype=torch.bfloat16)
        with session.recording(16) as recorder:
            _reduce(ops, handle, x)  # a warm-up: no capture, nothing owed
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                _reduce(ops, handle, x)
                _reduce(ops, handle, x)
        capture = recorder.done("")
        handles, offsets = ops.get_graph_buffer_ipc_meta(handle)
        assert len(offsets) == 2  # the two graph buffers captured
        if registered:  # what the framework's capture context does on leaving
            ops.register_graph_buffers(handle, [handles] * 8, [offsets] * 8)
        session.settle()
    assert [(c.op, c.count) for c in capture.collectives] == [(f"{NAMESPACE}::all_reduce", 2)]
    hazards = [h for h in capture.hazards if h.category == UNREGISTERED]
    if registered:
        assert hazards == []
    else:
        (hazard,) = hazards
        assert hazard.count == 2 and hazard.site.function == "_reduce" and hazard.segment == 1
        assert "register_graph_buffers" in hazard.what
    assert not hasattr(torch.ops, NAMESPACE) or not hasattr(getattr(torch.ops, NAMESPACE), "meta_size")


class _Function:
    def __init__(self, name):
        self.name = name


class _Wrapper:
    """A framework's ctypes wrapper of libnccl, as SGLang's and vLLM's are
    built: the library and its functions cached per path."""

    exported_functions = [_Function(n) for n in ("ncclGetVersion", "ncclCommInitRank", "ncclAllReduce",
                                                "ncclGroupStart")]
    path_to_library_cache: dict = {}
    path_to_dict_mapping: dict = {}


def test_the_nccl_library_answers_the_wrappers_calls_and_tells_the_world_of_collectives():
    heard = []
    with UndoLog() as log:
        assert nccl.install(log, _Wrapper, "libnccl-that-is-not-here.so.2")
        world.listen(log, heard.append)
        funcs = _Wrapper.path_to_dict_mapping["libnccl-that-is-not-here.so.2"]
        version, comm = ctypes.c_int(), ctypes.c_void_p()
        assert funcs["ncclGetVersion"](ctypes.byref(version)) == 0 and version.value == nccl.VERSION
        assert funcs["ncclCommInitRank"](ctypes.byref(comm), 8, None, 0) == 0 and comm.value
        assert funcs["ncclAllReduce"](None, None, 16, 0, 0, comm, None) == 0
        assert funcs["ncclGroupStart"]() == 0
    assert heard == ["nccl::ncclAllReduce"]
    assert _Wrapper.path_to_dict_mapping == {} and _Wrapper.path_to_library_cache == {}

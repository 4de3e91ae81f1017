"""SGLang's world for a launch: a world of one (gloo), or for a launch over
N GPUs the traced rank of a world of N over torch's fake process group
(emulation/world.py), with the node's topology answered and the libraries
its communicators load stood in; then its model-parallel groups, the
communicators it set up or declined for them, and its collective operators
declared to the world. docs/emulation.md, "The emulated world".
"""

from __future__ import annotations

import importlib
import socket
import sys
import types
from typing import Any

import torch

from graphbreak_doctor.emulation import world
from graphbreak_doctor.emulation.standins import cuda_ipc, nccl
from graphbreak_doctor.patching import UndoLog, references
from graphbreak_doctor.targets.frameworks.sglang import launch
from graphbreak_doctor.targets.frameworks.sglang.release import call, optional, require


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def world_size(server_args: Any) -> int:
    """The ranks of the launch's world, as SGLang's own bootstrap counts them
    (tensor-parallel x pipeline-parallel ranks)."""
    return max(1, int(getattr(server_args, "tp_size", 1) or 1)) * max(1, int(getattr(server_args, "pp_size", 1) or 1))


def join_world(log: UndoLog, server_args: Any, rank: int) -> list[str]:
    """SGLang's world: a world of one (gloo) for a one-GPU launch; for a
    launch over N GPUs, the traced rank of N ranks over torch's fake process
    group (emulation/world.py), whose groups SGLang then builds with the
    backend its server asks for, with the node's topology answered and the
    libraries its communicators load stood in (standins/nccl.py,
    standins/cuda_ipc.py). Returns a line for each stand-in."""
    from torch._dynamo import trace_rules

    _, init = require("sglang.srt.distributed.parallel_state:init_distributed_environment")
    if torch.distributed.is_initialized():
        return []
    size = world_size(server_args)
    stood_in = []
    # torch.distributed's initialization clears Dynamo's trace-rule caches;
    # the map the emulation built (torch.distributed imported) is kept:
    # docs/design.md, "SGLang's set-up calls".
    with UndoLog() as keep:
        keep.setattr(trace_rules, "clear_lru_cache", lambda: None)
        if size > 1:
            world.join(log, size, rank, node_gpus=torch.cuda.device_count())
            world.no_peer_queue(log, optional("sglang.srt.distributed.device_communicators.shm_broadcast:MessageQueue"))
            world.answer_node_check(log, optional("sglang.srt.distributed.parallel_state:in_the_same_node_as"))
            # SGLang tests peer-to-peer access between the node's GPUs by
            # copying between them in a subprocess (no GPU there); its own
            # switch trusts the driver's report instead, which the emulated
            # node answers (every pair of one node reaches the other).
            log.setenv("SGLANG_SKIP_P2P_CHECK", "1")
            wrapper = optional("sglang.srt.distributed.device_communicators.pynccl_wrapper:NCCLLibrary")
            where = optional("sglang.srt.distributed.device_communicators.pynccl_wrapper:find_nccl_library")
            if wrapper is not None and where is not None and nccl.install(log, wrapper, where()):
                stood_in.append(f"{where()}: the emulated NCCL library (a rank whose peers are not there): SGLang's "
                                "PyNccl wrapper runs over it, its collectives move nothing")
            stood_in += _cuda_runtime(log)
            init(world_size=size, rank=rank, local_rank=rank % max(1, torch.cuda.device_count()),
                 backend="nccl", distributed_init_method="fake://")
        else:
            init(world_size=1, rank=0, local_rank=0, backend="gloo",
                 distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
    destroy = optional("sglang.srt.distributed.parallel_state:destroy_distributed_environment")
    log.call_on_undo(destroy if destroy is not None else torch.distributed.destroy_process_group)
    return stood_in


def _cuda_runtime(log: UndoLog) -> list[str]:
    """SGLang's ctypes wrapper of the CUDA runtime (what its custom all-reduce
    allocates and shares buffers through) over the emulated runtime's memory
    and IPC calls (standins/cuda_ipc.py), at the library SGLang finds loaded,
    or at the emulated one's name where none is (its lookup answers that)."""
    wrapper = optional("sglang.srt.distributed.device_communicators.cuda_wrapper:CudaRTLibrary")
    find = optional("sglang.srt.distributed.device_communicators.cuda_wrapper:find_loaded_library")
    if wrapper is None or find is None:
        return []
    path = find("libcudart")
    if path is None:
        path = cuda_ipc.EMULATED_PATH

        def find_loaded_library(name: str) -> str | None:
            return path if name == "libcudart" else find(name)

        for module, name in references(find):
            log.setattr(module, name, find_loaded_library)
    cuda_ipc.install(log, wrapper, path)
    return [f"{path}: the emulated CUDA runtime's memory and IPC calls under SGLang's CudaRTLibrary (its custom "
            "all-reduce's shared buffers: made-up addresses, never dereferenced)"]


def declare_collectives(log: UndoLog) -> None:
    """SGLang's own collective operators, read from its code, declared to the
    emulated world (with ``log``): each function of SGLang's loaded modules
    that it registered as an operator of its own (``torch.ops.sglang.<name>``)
    and that is defined in the module holding its process groups (its
    all-reduce, its all-gather) or calls FlashInfer's communication package
    (its fused all-reduce + RMSNorm). Under the emulation such an operator
    runs its fake, not its body: the operator itself is the collective. A
    CUDA-graph capture runs the body (the function SGLang registered) of
    those its group coordinator serves, which reach the communicator SGLang
    chose; FlashInfer's fused ones keep their fakes (their workspace is made
    through CUDA driver calls the emulated GPU does not answer)."""
    ops = getattr(torch.ops, "sglang", None)
    parallel = importlib.import_module("sglang.srt.distributed.parallel_state")
    found, bodies = {}, {}
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("sglang.") and m is not None]:
        for name, value in list(vars(module).items()):
            wrapped = getattr(value, "__wrapped__", None)
            if (not callable(wrapped) or getattr(value, "__module__", None) != module.__name__
                    or ops is None or not hasattr(ops, name)):
                continue
            if module is parallel or _calls_communication(wrapped):
                wrapper = getattr(getattr(value, "__code__", None), "co_filename", "")
                found[f"sglang::{name}"] = (getattr(module, "__file__", "") or "", wrapper)
                if module is parallel and not _calls_communication(wrapped):
                    bodies[f"sglang::{name}"] = wrapped
    world.declare_collectives(log, found, bodies)


def _calls_communication(function: Any) -> bool:
    """Whether ``function`` reads a module of FlashInfer's communication package."""
    code = getattr(function, "__code__", None)
    if code is None:
        return False
    for name in code.co_names:
        value = getattr(function, "__globals__", {}).get(name)
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[:2] == ["flashinfer", "comm"]:
            return True
    return False


def layout(server_args: Any) -> dict[str, int]:
    """The launch's parallel layout and the traced rank: tensor-, pipeline-
    and expert-parallel sizes as SGLang resolved them, the world, the rank."""
    here = world.joined() or world.World(1, 0)
    sizes = {name: int(getattr(server_args, f"{name}_size", 1) or 1) for name in ("tp", "pp", "ep", "dp")}
    return {**sizes, **here.as_dict()}


def model_parallel(log: UndoLog, server_args: Any) -> list[str]:
    """SGLang's model-parallel groups at the launch's widths (older releases
    take them as arguments; newer ones read the published launch). Returns
    what SGLang logged meanwhile about the communicators it set up or declined."""
    parallel = importlib.import_module("sglang.srt.distributed.parallel_state")
    if parallel.model_parallel_is_initialized():
        return []
    unset = [name for name, value in vars(parallel).items() if name.startswith("_") and name.isupper() and value is None]
    many = world.joined() is not None
    with launch.sglang_log(launch.COMMUNICATION_WORDS) as said:
        call(parallel.initialize_model_parallel,
             tensor_model_parallel_size=int(getattr(server_args, "tp_size", 1) or 1),
             pipeline_model_parallel_size=int(getattr(server_args, "pp_size", 1) or 1),
             expert_model_parallel_size=int(getattr(server_args, "ep_size", 1) or 1),
             backend="nccl" if many else "gloo")
    # After SGLang's teardown (which runs first): the groups it leaves set
    # (0.5.9 forgets the attention group) are unset again, so the process can
    # build once more.

    def unset_groups() -> None:
        for name in unset:
            setattr(parallel, name, None)

    log.call_on_undo(unset_groups)
    destroy = getattr(parallel, "destroy_model_parallel", None)
    if destroy is not None:
        log.call_on_undo(destroy)
    return said


def communicators(said: list[str], stood_in: list[str]) -> dict[str, Any]:
    """The device communicators SGLang set up for each of this rank's process
    groups of more than one rank, as its group coordinator holds them
    (world.communicators_of), with what SGLang said while it chose them (a
    communicator it declined for the device's topology, or one that could
    not be built here)."""
    parallel = importlib.import_module("sglang.srt.distributed.parallel_state")
    out = []
    for name, ref in sorted(getattr(parallel, "_groups", {}).items()):
        group = ref() if callable(ref) else ref
        if group is None or int(getattr(group, "world_size", 1) or 1) <= 1:
            continue
        out.append({"group": name, "ranks": int(group.world_size), **world.communicators_of(group)})
    return {"groups": out, "said": list(said), "stand_ins": list(stood_in)}


def communicator_note(record: dict[str, Any]) -> str:
    """One line of ``communicators``' record for the findings' notes."""
    return world.communicator_note(record, "SGLang")


__all__ = ["communicator_note", "communicators", "declare_collectives", "join_world", "layout", "model_parallel",
           "world_size"]

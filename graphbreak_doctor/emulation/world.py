"""A world of N ranks in one process: the traced rank joins torch's own fake
process group, so a framework's parallel set-up runs with the launch's world
size and this rank's index, and its collectives are real
``torch.distributed`` (and functional-collective) calls that Dynamo traces
as it does on a server.

What the fake world is: every collective returns at once, with its input's
shape and this rank's own values (nothing is sent, nothing is reduced), so
shapes, code paths and graph structure are this rank's; every group any code
asks for afterwards (``nccl``, ``gloo``, a vendor's backend) is a fake group
over the same ranks, and an object collective returns the value the traced
rank itself holds: the world is symmetric (every peer runs this rank's code
with its values), so an all-gather gives every rank this rank's object and a
broadcast from a peer delivers what this rank sent in the same call to the
group (before it has sent any, its own objects stay). What it is not: no
bandwidth, no NCCL kernel behaviour, no numerics across ranks, and nothing
ever waits on a peer. docs/emulation.md, "The emulated world".

All of it goes through the caller's undo log: leaving the log destroys the
world and puts torch.distributed back as it was.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch.distributed as dist
from torch.distributed import distributed_c10d

from graphbreak_doctor.patching import UndoLog, references
from graphbreak_doctor.text import one_line

FAKE = "fake"
# torch.distributed's own operators: every collective a framework runs
# through torch ends in one of them.
TORCH_COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional")
# The operators a framework registers as its own collectives, each with the
# files of its code: the module that defines it, and the wrapper the
# framework calls it through (declared by the framework: declare_collectives).
_declared: dict[str, tuple[str, str]] = {}
_bodies: dict[str, Callable[..., Any]] = {}
# Who hears of a collective a stood-in library ran through a framework's own
# wrapper (a C call, not an operator): the CUDA-graph recorder, while it
# records (listen).
_heard: Callable[[str], None] = lambda name: None
# The GPUs of one node of the world (join's node_gpus).
_node_gpus = 1


@dataclass(frozen=True)
class World:
    """The world the traced rank belongs to."""

    size: int
    rank: int

    def as_dict(self) -> dict[str, int]:
        return {"world_size": self.size, "rank": self.rank}


def joined() -> World | None:
    """The fake world this process is a rank of, or None (no world, or a real one)."""
    if not dist.is_available() or not dist.is_initialized() or dist.get_backend() != FAKE:
        return None
    return World(dist.get_world_size(), dist.get_rank())


def join(log: UndoLog, size: int, rank: int = 0, node_gpus: int = 1) -> World:
    """Make this process rank ``rank`` of a fake world of ``size`` ranks
    (undone with ``log``), whose ranks fill nodes of ``node_gpus`` GPUs in
    order (ranks 0..node_gpus-1 on the first node). ValueError for a rank
    outside the world, or a process that is already a rank of another world."""
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a world of {size}")
    log.setattr(sys.modules[__name__], "_node_gpus", max(1, node_gpus))
    if dist.is_initialized():
        raise ValueError("this process already belongs to a torch.distributed world")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group(FAKE, rank=rank, world_size=size, store=FakeStore())
    log.call_on_undo(_leave)
    real_new_group = distributed_c10d.new_group

    def new_group(ranks: Any = None, timeout: Any = None, backend: Any = None, pg_options: Any = None,
                  *args: Any, **kwargs: Any) -> Any:
        # Whatever backend the caller names, the group is a fake one.
        return real_new_group(ranks, timeout, FAKE, None, *args, **kwargs)

    real_broadcast_objects = distributed_c10d.broadcast_object_list

    sent: dict[tuple, list] = {}

    def broadcast_object_list(object_list: list, *args: Any, **kwargs: Any) -> None:
        # A fake broadcast moves no bytes. From this rank: what it sends is
        # kept. From a peer: the world is symmetric (every rank runs this
        # rank's code with its values), so the peer sends what this rank sent
        # in the same call to the group -- or, before it has, the objects
        # this rank holds stay.
        group = kwargs.get("group", args[1] if len(args) > 1 else None)
        src = kwargs.get("src", args[0] if args else None)
        if not _fake(group):
            return real_broadcast_objects(object_list, *args, **kwargs)
        key = (id(group), len(object_list))
        if src == rank:
            sent[key] = list(object_list)
        elif key in sent:
            object_list[:] = list(sent[key])
        return None

    real_gather_objects = distributed_c10d.all_gather_object

    def all_gather_object(object_list: list, obj: Any, group: Any = None) -> None:
        # Every rank of a fake world holds what this rank holds.
        if _fake(group):
            object_list[:] = [obj] * len(object_list)
            return None
        return real_gather_objects(object_list, obj, group)

    for owner in (dist, distributed_c10d):
        log.setattr(owner, "new_group", new_group)
        log.setattr(owner, "broadcast_object_list", broadcast_object_list)
        log.setattr(owner, "all_gather_object", all_gather_object)
    return World(size, rank)


def same_node(group: Any, source_rank: int = 0) -> list[bool]:
    """For each rank of ``group`` (a process group of the fake world), whether
    it is on the node of the group's rank ``source_rank``: the answer a
    framework's node check gets on the real server, where it sums one-hot
    flags over the group (a fake all-reduce sums nothing)."""
    ranks = dist.get_process_group_ranks(group)
    node = ranks[source_rank] // _node_gpus
    return [r // _node_gpus == node for r in ranks]


def answer_node_check(log: UndoLog, check: Any) -> None:
    """A framework's check of which ranks of a group share a node
    (``check(group, source_rank=0) -> list[bool]``) answered by
    ``same_node`` wherever a module holds it (with ``log``)."""
    if check is None:
        return

    def in_the_same_node_as(group: Any, source_rank: int = 0) -> list[bool]:
        return same_node(group, source_rank)

    for module, name in references(check):
        log.setattr(module, name, in_the_same_node_as)


def declare_collectives(log: UndoLog, ops: dict[str, tuple[str, str]],
                        bodies: dict[str, Callable[..., Any]] | None = None) -> None:
    """Operators ("ns::name") a framework registered as its own collectives,
    each with (the file that defines it, the file of the wrapper it is called
    through): where its fake runs instead of its body (a fake tensor), the
    torch collective inside is never seen, so the operator itself counts.
    ``bodies``: the Python function each operator runs on a GPU (its
    registered implementation), which a CUDA-graph capture runs in its place
    so that the communicator the framework chose is what is captured."""
    log.setattr(sys.modules[__name__], "_declared", {**_declared, **ops})
    log.setattr(sys.modules[__name__], "_bodies", {**_bodies, **(bodies or {})})


def body_of(op: Any) -> Callable[..., Any] | None:
    """The Python function a declared collective runs on a GPU, if the framework gave it."""
    return _bodies.get(op_name(op))


def listen(log: UndoLog, hear: Callable[[str], None]) -> None:
    """``hear(name)`` is told of each collective a stood-in library runs (with ``log``)."""
    log.setattr(sys.modules[__name__], "_heard", hear)


def ran_in_library(name: str) -> None:
    """A stood-in library ran the collective ``name`` ("nccl::ncclAllReduce")."""
    _heard(name)


def op_name(op: Any) -> str:
    """An operator's name as frameworks declare it: "ns::name", or "ns::name.overload" for another overload."""
    return op.name().replace(".default", "")


def files_of(op: Any) -> tuple[str, str]:
    """(defining file, wrapper file) of a collective a framework declared; ('', '') for torch's own."""
    return _declared.get(op_name(op), ("", ""))


def is_collective(op: Any) -> bool:
    """Whether the operator ``op`` (an OpOverload) is a collective: torch's
    own, or one a framework declared."""
    return op.namespace in TORCH_COLLECTIVE_NAMESPACES or op_name(op) in _declared


def no_peer_queue(log: UndoLog, queue_cls: Any, factory: str = "create_from_process_group") -> None:
    """A framework's shared-memory queue to its peer processes (what its
    scheduler broadcasts requests through) is not made: it waits until every
    peer process has attached, and in a world of one process none will. No
    forward uses it; without it the framework broadcasts over the (fake)
    group itself."""
    if queue_cls is not None and hasattr(queue_cls, factory):
        log.setattr(queue_cls, factory, staticmethod(lambda *args, **kwargs: None))


def communicators_of(holder: Any) -> dict[str, list[str]]:
    """The device communicators a framework's process group holds (its group
    coordinator, or the device communicator that holds them for it): each
    ``*_comm`` / ``*_communicator`` it made, by class, enabled unless it says
    it is disabled."""
    made = {type(value).__name__: not getattr(value, "disabled", False)
            for attr, value in (getattr(holder, "__dict__", None) or {}).items()
            if value is not None and attr.endswith(("_comm", "_communicator")) and not isinstance(value, bool)}
    return {"enabled": sorted(k for k, on in made.items() if on),
            "disabled": sorted(k for k, on in made.items() if not on)}


def communicator_note(record: dict[str, Any], framework: str) -> str:
    """One line of a communicators record (``{groups: [{group, ranks,
    enabled, disabled}], said}``) for the findings' notes ("" for a world of
    one): each group's enabled communicators, then what the framework said."""
    groups = record.get("groups") or []
    if not groups:
        return ""
    here = joined() or World(1, 0)
    parts = [f"{g['group']} ({g['ranks']} ranks): {', '.join(g['enabled']) or 'none enabled'}" for g in groups]
    said = "; ".join(one_line(text, 160) for text in record.get("said") or ())
    return (f"communicators (rank {here.rank} of {here.size}): " + "; ".join(parts)
            + (f" -- {framework} said: {said}" if said else ""))


def _fake(group: Any) -> bool:
    try:
        return dist.get_backend(group) == FAKE
    except (ValueError, RuntimeError):  # a group this rank is not in: nothing to receive
        return True


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["FAKE", "TORCH_COLLECTIVE_NAMESPACES", "World", "answer_node_check", "body_of", "communicator_note",
           "communicators_of", "declare_collectives",
           "files_of", "is_collective", "join", "joined", "listen", "no_peer_queue", "op_name", "ran_in_library",
           "same_node"]

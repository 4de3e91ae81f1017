"""A model as vLLM builds and runs it: its distributed state for one rank,
the model class its registry maps the config's architecture to, built and
given dummy weights by its own loader (``--load-format dummy``: no
checkpoint is read), on the emulated GPU; then run as vLLM's profile run
runs it -- one forward in a forward context with no attention metadata, at
the launch's largest batch of tokens.

The model is built at full depth and run through its first ``n`` decoder
layers only, ``n`` the fewest leading layers that hold every kind of layer
the model has (two layers are of one kind when their module trees hold the
same classes at the same places): the decoder loop's own pipeline-stage
bounds (``start_layer``/``end_layer``, which every vLLM model that supports
pipeline parallelism iterates) are set to that range, and the layers past
it are vLLM's placeholder for another stage's layers before the loader
fills and processes the weights, as a pipeline stage of ``n`` layers would
be (a full-depth GLM-5 spends minutes in weight processing alone).
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator

import torch

from graphbreak_doctor.emulation import world
from graphbreak_doctor.emulation.standins import nccl
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import LaunchRefused, TargetError, refused_by_check, shards
from graphbreak_doctor.targets.frameworks.vllm.launch import COMMUNICATION, listening, version
from graphbreak_doctor.text import one_line


@dataclass
class Built:
    model: torch.nn.Module
    backbone: torch.nn.Module  # the module vLLM's decorator compiles, or the model where it has none
    layers: int  # decoder layers run
    full: int  # decoder layers in the config
    notes: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # each decoder layer's kind, as built (shards.layer_kind)
    # The communicators vLLM set up for this rank's groups (world.communicator_note's record).
    communicators: dict[str, Any] = field(default_factory=dict)


def init_distributed(vllm_config: Any, log: UndoLog, folder: Path, rank: int = 0) -> dict[str, Any]:
    """vLLM's process groups at the launch's layout: for one GPU, a world of
    one (gloo on the host: no NCCL); for several, the traced rank of a world
    of that many over torch's fake process group (emulation/world.py),
    whose groups vLLM builds with the backend its worker asks for, with the
    NCCL library its PyNccl communicator loads stood in (standins/nccl.py).
    Returns the communicators vLLM set up for each group of more than one
    rank, what it said while it chose them, and the stand-ins."""
    from vllm.distributed import parallel_state

    config = vllm_config.parallel_config
    tp, pp = int(config.tensor_parallel_size), int(config.pipeline_parallel_size)
    size = int(getattr(config, "world_size", tp * pp) or tp * pp)
    stood_in: list[str] = []
    if size > 1:
        from vllm.distributed.device_communicators import pynccl_wrapper, shm_broadcast

        world.join(log, size, rank, node_gpus=torch.cuda.device_count())
        world.no_peer_queue(log, getattr(shm_broadcast, "MessageQueue", None))
        world.answer_node_check(log, getattr(parallel_state, "in_the_same_node_as", None))
        wrapper, where = getattr(pynccl_wrapper, "NCCLLibrary", None), getattr(pynccl_wrapper, "find_nccl_library", None)
        if wrapper is not None and where is not None and nccl.install(log, wrapper, where()):
            stood_in.append(f"{where()}: the emulated NCCL library (a rank whose peers are not there): vLLM's "
                            "PyNccl wrapper runs over it, its collectives move nothing")
    with listening(COMMUNICATION) as said:
        if size > 1:
            parallel_state.init_distributed_environment(world_size=size, rank=rank,
                                                        local_rank=rank % max(1, torch.cuda.device_count()),
                                                        backend="nccl",
                                                        distributed_init_method="fake://")
        else:
            parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                                        distributed_init_method=f"file://{folder / 'dist-init'}")
        parallel_state.ensure_model_parallel_initialized(tp, pp)
    ops = collective_ops(parallel_state)
    # A CUDA-graph capture runs each one's body (the function vLLM registered),
    # which reaches the communicator vLLM chose.
    world.declare_collectives(log, ops, {name: getattr(parallel_state, name.split("::", 1)[1]) for name in ops})

    def destroy() -> None:
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()

    log.call_on_undo(destroy)
    groups = []
    for name, ref in sorted(getattr(parallel_state, "_groups", {}).items()):
        group = ref() if callable(ref) else ref
        if group is not None and int(getattr(group, "world_size", 1) or 1) > 1:
            groups.append({"group": name, "ranks": int(group.world_size),
                           **world.communicators_of(getattr(group, "device_communicator", None))})
    return {"groups": groups, "said": said.lines if groups else [], "stand_ins": stood_in}


def collective_ops(parallel_state: Any) -> dict[str, tuple[str, str]]:
    """vLLM's own collective operators, read from its code: the functions of
    the module that holds its process groups that it registered as operators
    of its own under their names (``torch.ops.vllm.all_reduce``)."""
    ops = getattr(torch.ops, "vllm", None)
    found = {}
    for name, value in vars(parallel_state).items():
        if (ops is not None and callable(value) and getattr(value, "__module__", None) == parallel_state.__name__
                and not name.startswith("_") and hasattr(ops, name)):
            found[f"vllm::{name}"] = (parallel_state.__file__, "")
    return found


def init_workspace(log: UndoLog) -> None:
    """vLLM's scratch-workspace manager on the GPU, as its worker sets it up
    before it builds the model runner (attention backends take their
    workspaces from it when they are built)."""
    from vllm.v1.worker import workspace

    workspace.init_workspace_manager(torch.device("cuda", 0))
    log.call_on_undo(lambda: setattr(workspace, "_manager", None))



def refusal(error: BaseException) -> LaunchRefused | None:
    """vLLM's refusal of the launch on the emulated device, where one of its own
    checks raised ``error``; None for any other failure."""
    return refused_by_check(error, "vllm", f"vLLM {version()}")


def build(vllm_config: Any, log: UndoLog) -> Built:
    """The model, by vLLM's loader, with vLLM's current config set for as
    long as ``log`` lives.
    The loader builds every layer; the ones past the reduced depth are
    taken out before it fills and processes the weights, as a pipeline
    stage holds only its own layers."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import base_loader, get_model
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    log.enter(set_current_vllm_config(vllm_config))
    talk = init_distributed(vllm_config, log, Path(tempfile.mkdtemp(prefix="graphbreak-doctor-vllm-dist-")))
    full = int(getattr(vllm_config.model_config.hf_config, "num_hidden_layers", 0) or 0)
    reduced: dict[str, Any] = {}
    # Where the loader makes the model: its create_model, or in an older
    # release the initialize_model its module calls.
    owner, name = ((BaseModelLoader, "create_model") if hasattr(BaseModelLoader, "create_model")
                   else (base_loader, "initialize_model"))
    create = getattr(owner, name)

    def reducing(*args: Any, **kwargs: Any) -> torch.nn.Module:
        model = create(*args, **kwargs)
        backbone = getattr(model, "model", model)
        reduced["kinds"] = [shards.layer_kind(layer) for layer in getattr(backbone, "layers", None) or ()]
        reduced["depth"] = _reduce(backbone, full)
        return model

    try:
        with torch.device("cuda"), UndoLog() as window:
            window.setattr(owner, name, reducing)
            init_workspace(log)
            model = get_model(vllm_config=vllm_config)
    except TargetError:
        raise
    except Exception as e:
        refused = refusal(e)
        if refused is not None:
            raise refused from e
        raise TargetError(f"vLLM could not build the model: {type(e).__name__}: {one_line(str(e), 300)}") from e
    backbone = getattr(model, "model", model)
    kinds = reduced.get("kinds") or [shards.layer_kind(layer) for layer in getattr(backbone, "layers", None) or ()]
    layers, notes = reduced.get("depth") or _reduce(backbone, full)
    return Built(model=model, backbone=backbone, layers=layers, full=full, notes=notes, kinds=kinds,
                 communicators=talk)


def _structure(layer: torch.nn.Module) -> Hashable:
    return tuple((name, type(module).__qualname__) for name, module in layer.named_modules())


def _reduce(backbone: torch.nn.Module, full: int) -> tuple[int, list[str]]:
    layers = getattr(backbone, "layers", None)
    if layers is None or not hasattr(backbone, "end_layer") or getattr(backbone, "start_layer", 0) != 0:
        return full, ["the model's decoder loop has no pipeline-stage bounds: run at full depth"]
    seen: set[Hashable] = set()
    last_new = 0
    for index, layer in enumerate(layers):
        kind = _structure(layer)
        if kind not in seen:
            seen.add(kind)
            last_new = index
    kept = last_new + 1
    from vllm.model_executor.models.utils import PPMissingLayer

    for index in range(kept, len(layers)):
        layers[index] = PPMissingLayer()
    backbone.end_layer = kept
    return kept, [f"{kept} of {len(layers)} decoder layers run ({len(seen)} kind(s) of layer; the decoder loop's "
                  "pipeline-stage bounds set to them, the others not loaded)"]


@contextlib.contextmanager
def forward_context(vllm_config: Any, tokens: int) -> Iterator[None]:
    """vLLM's forward context of its profile run: no attention metadata,
    ``tokens`` tokens, no CUDA-graph runtime mode."""
    from vllm.forward_context import set_forward_context

    with set_forward_context(None, vllm_config, num_tokens=tokens):
        yield


def inputs(tokens: int) -> dict[str, Any]:
    """What vLLM's runner passes the model in its profile run."""
    return {"input_ids": torch.zeros(tokens, dtype=torch.int64, device="cuda"),
            "positions": torch.zeros(tokens, dtype=torch.int64, device="cuda"),
            "intermediate_tensors": None, "inputs_embeds": None}


def as_vllm_compiles(backbone: torch.nn.Module, kwargs: dict[str, Any], log: UndoLog) -> str:
    """The decorated module called as the doctor traces it: its own compile
    off (an eager call runs its forward; Dynamo, which the doctor runs,
    traces it whole), and the inputs' dims marked dynamic by vLLM's own
    marking function, as its decorator marks them before it compiles.
    Returns what was marked, or why nothing was, in words ("" for a module
    vLLM's decorator does not compile)."""
    if getattr(backbone, "do_not_compile", True):
        return ""
    log.setattr(backbone, "do_not_compile", True)
    call = type(backbone).__call__
    cells = dict(zip(call.__code__.co_freevars, call.__closure__ or ()))
    mark = cells.get("_mark_dynamic_inputs")
    if mark is None:  # a release that marks otherwise: the dims stay static
        return "vLLM's decorator has no marking function here: no dim marked dynamic"
    mark.cell_contents(backbone, backbone.compilation_config.dynamic_shapes_config.type, **kwargs)
    marked = [f"{name}{sorted(getattr(value, '_dynamo_dynamic_indices', ()))}" for name, value in kwargs.items()
              if isinstance(value, torch.Tensor) and getattr(value, "_dynamo_dynamic_indices", None)]
    return "marked dynamic by vLLM's decorator: " + (", ".join(marked) or "none")


def run(built: Built, vllm_config: Any, tokens: int) -> Any:
    """One forward as the profile run makes it (inside its forward context)."""
    with torch.no_grad(), forward_context(vllm_config, tokens):
        return built.model(**inputs(tokens))


def splitter(splitting_ops: list[str]) -> Callable[[torch.fx.GraphModule], tuple[int, list[str]]]:
    """vLLM's own graph split at its splitting ops: (pieces, the op each
    splitting piece is cut at, in order, as vLLM's own rule matches it)."""
    from vllm.compilation.backends import split_graph
    from vllm.compilation.partition_rules import should_split

    def split(gm: torch.fx.GraphModule) -> tuple[int, list[str]]:
        _split_gm, items = split_graph(gm, list(splitting_ops))
        at = []
        for item in items:
            if item.is_splitting_graph:  # vLLM keeps consecutive split ops in one piece
                ops = [_op_name(n.target) for n in item.graph.graph.nodes if should_split(n, list(splitting_ops))]
                at.append(" + ".join(dict.fromkeys(ops)) or "?")
        return len(items), at

    return split


def _op_name(target: Any) -> str:
    name = getattr(target, "_qualified_op_name", None)
    return name if name else target.name() if hasattr(target, "name") else str(target)


__all__ = ["Built", "as_vllm_compiles", "build", "forward_context", "inputs", "run", "splitter"]

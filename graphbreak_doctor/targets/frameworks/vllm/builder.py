"""A served model's forward as vLLM builds, runs and compiles it.

``build_model`` imports vLLM inside the device (stand-ins for its native
libraries first, its CUDA platform installed before any model import, its
caches in a scratch folder), resolves the launch (launch.py) and makes the
target. The model itself is built by the target's ``prepare`` (a trace of
one mode) or ``discover`` (the compile map), through vLLM's own loader
(model.py):

- the map: vLLM's profile run (one forward at the launch's largest batch of
  tokens) with ``torch.compile`` recorded; the regions it entered (vLLM's
  ``@support_torch_compile`` forward, model-local compiled helpers) are
  traced as vLLM compiles them: its own options (``fullgraph=True``,
  ``dynamic=False`` with its ``mark_dynamic`` dims on the arguments), and
  its backend's split of the graph at its splitting ops counted by vLLM's
  own ``split_graph`` (no Inductor). A launch that compiles nothing
  (``--enforce-eager``, ``-O0``, the breakable-CUDA-graph list) says so,
  in vLLM's words.
- a trace (``--mode fullgraph`` / ``explain``): the forward vLLM compiles
  (the decorated module, or the backbone of a model without the decorator:
  what would fail if it were compiled), called as the profile run calls it.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from graphbreak_doctor.emulation import standins, world
from graphbreak_doctor.emulation.presets import emulated_names
from graphbreak_doctor.model import TargetInfo
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import LaunchRefused, PhaseNotRun, Target, TargetError, fit, shards
from graphbreak_doctor.targets.frameworks import registry
from graphbreak_doctor.targets.frameworks.framework import Served
from graphbreak_doctor.targets.frameworks.vllm import PHASES, cudagraphs, emulation, launch
from graphbreak_doctor.targets.frameworks.vllm import model as vllm_model
from graphbreak_doctor.text import one_line


def build_model(served: Served, *, device: str, log: UndoLog, launch_args: tuple[str, ...] = (),
                tokens: int | None = None) -> Target:
    if device == "cpu":
        raise TargetError(f"vLLM's models run on a CUDA device: use an emulated one (--device {emulated_names()})")
    folder = emulation.scratch(log)
    installed = registry.install_stand_ins(log)
    emulation.isolate_caches(log, folder)
    emulation.aot_compile_off(log)
    emulation.accelerator_streams(log)
    emulation.install_platform(log)
    emulation.inspect_in_process(log)
    config, said = launch.resolve(launch_args, served.config_dir)
    standins.register_missing_fakes(installed)
    facts = launch.describe(config, said, launch_args)
    resolved = facts["resolved"]
    release = launch.version()
    # The profile run's batch: the launch's largest (vLLM runs its profile
    # run at max_num_batched_tokens), unless the user asks for another.
    size = tokens or resolved["max_num_batched_tokens"]
    facts["arguments"] = list(launch_args)
    facts["phases"] = {PHASES[0]: _phase_line(resolved, size)}
    info = TargetInfo(
        spec=f"{served.spec}:model",
        provider=served.provider,
        title=f"{served.name} model forward, vLLM {release}",
        facts={"impl": "vllm", "vllm_version": release, "model": served.name, **served.facts, "scope": "model",
               "launch": facts, "emulation": [emulation.CHANGES[k] for k in emulation.CHANGES]},
        stand_ins=installed.lines,
        notes=["no checkpoint is read: vLLM's dummy-weight loader (--load-format dummy)"],
    )
    target = Target(fn=_not_prepared, info=info, own_warm_up=True, eager_phases=True)
    built: dict[str, vllm_model.Built] = {}  # the model the phases (or a mode's prepare) built
    target.prepare = functools.partial(_prepare, target, config, size, built)
    target.discover = functools.partial(_discover, target, config, size, built)
    target.cudagraphs = functools.partial(_cudagraphs, config, built)
    return target


def _phase_line(resolved: dict[str, Any], tokens: int) -> str:
    sizes = resolved["cudagraph_capture_sizes"]
    graphs = (f"CUDA graphs {resolved['cudagraph_mode']} at {len(sizes)} capture sizes ({sizes[0]}-{sizes[-1]})"
              if sizes and resolved["cudagraph_mode"] != "NONE" else f"CUDA graphs {resolved['cudagraph_mode']}")
    if not launch.compiled(resolved):
        why = "; ".join(resolved["not_compiled_because"]) or "vLLM's resolved configuration"
        return (f"vLLM's profile run at {tokens} tokens; not compiled (compilation mode {resolved['mode']}: {why}); "
                f"{graphs}")
    ranges = ", ".join(resolved["compile_ranges"]) or "one range"
    return (f"vLLM's profile run at {tokens} tokens; compiled by vLLM (compilation mode "
            f"{resolved['mode']}, backend {resolved['backend']}, dynamic shapes {resolved['dynamic_shapes']}, "
            f"compile ranges {ranges}); {graphs}")


def _build(target: Target, config: Any, log: UndoLog) -> vllm_model.Built:
    built = vllm_model.build(config, log)
    target.info.facts.update(layers_built=built.layers, model_layers=built.full,
                             model_class=type(built.model).__qualname__,
                             compiled_module=type(built.backbone).__qualname__)
    target.info.notes.extend(built.notes)
    talk = built.communicators
    target.info.stand_ins.extend(talk.get("stand_ins") or ())
    if talk.get("groups"):
        target.info.facts["launch"]["communicators"] = talk
        target.info.notes.append(world.communicator_note(talk, "vLLM"))
    parallel = config.parallel_config
    here = world.joined() or world.World(1, 0)
    target.info.facts["launch"]["layout"] = {
        "tp": int(parallel.tensor_parallel_size), "pp": int(parallel.pipeline_parallel_size),
        "ep": int(parallel.tensor_parallel_size * parallel.data_parallel_size)
        if getattr(parallel, "enable_expert_parallel", False) else 1,
        "dp": int(parallel.data_parallel_size), **here.as_dict()}
    layers = getattr(built.backbone, "layers", None)
    if layers is not None:
        # This rank's shard of one decoder layer of each kind, as vLLM's loader sized it.
        target.info.facts["shards"] = shards.by_kind(list(layers)[:built.layers])
        if built.kinds:
            # A release may leave it unset (None) where the launch sizes the KV cache otherwise.
            fraction = getattr(config.cache_config, "gpu_memory_utilization", None)
            memory, note = fit.assess(built.model, list(layers)[:built.layers], built.kinds,
                                      float(fraction) if fraction else None, "--gpu-memory-utilization")
            if memory is not None:
                target.info.facts["memory"] = memory
            target.info.notes.append(note)
    resolved = target.info.facts["launch"]["resolved"]
    if resolved["mode"] == "STOCK_TORCH_COMPILE":
        # vLLM's model runner compiles the whole model in place, with
        # fullgraph=True and the backend vLLM's config initializes, after it
        # loads it (its decorator then compiles nothing of its own).
        built.model.compile(fullgraph=True, backend=config.compilation_config.init_backend(config))
    elif launch.compiled(resolved):
        ops = resolved["splitting_ops"]
        target.info.split_ops = list(ops)
        target.splitter = vllm_model.splitter(ops)
    return built


def _discover(target: Target, config: Any, tokens: int, kept: dict[str, vllm_model.Built], log: UndoLog,
              phase_scope: Any) -> None:
    try:
        built = kept["model"] = _build(target, config, log)
    except LaunchRefused:  # vLLM's own refusal on this device: the server would not start
        raise
    except TargetError as e:  # the launch is known (the map says it); the model does not build here
        raise PhaseNotRun(f"the {PHASES[0]} phase cannot run here: {e}") from e
    context = functools.partial(vllm_model.forward_context, config, tokens)
    with phase_scope(PHASES[0], context):
        try:
            vllm_model.run(built, config, tokens)
        except Exception as e:
            refused = vllm_model.refusal(e)
            if refused is not None:
                raise refused from e
            raise PhaseNotRun(f"vLLM's profile run raises here: {type(e).__name__}: {one_line(str(e), 300)}") from e


def _prepare(target: Target, config: Any, tokens: int, kept: dict[str, vllm_model.Built], mode: str,
             log: UndoLog) -> None:
    """The forward vLLM compiles (the decorated module, else the backbone),
    called as the profile run calls it, inside its forward context."""
    built = kept["model"] = _build(target, config, log)
    log.enter(torch.no_grad())
    log.enter(vllm_model.forward_context(config, tokens))
    target.fn = built.backbone
    target.kwargs = {k: v for k, v in vllm_model.inputs(tokens).items()}
    marked = vllm_model.as_vllm_compiles(built.backbone, target.kwargs, log)
    if marked:
        target.info.notes.append(marked)
    target.info.function = f"{type(built.backbone).__qualname__}.forward"


def _cudagraphs(config: Any, kept: dict[str, vllm_model.Built], log: UndoLog, session: Any) -> list:
    """What the launch captures into CUDA graphs, of the model its phases built."""
    if "model" not in kept:
        raise TargetError("the model was not built: its phases did not run")
    built = kept["model"]
    return cudagraphs.capture_phases(config, built.model, built.backbone, log, session)


def _not_prepared(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a vLLM target is traced after its prepare(mode) built the model")


__all__ = ["build_model"]

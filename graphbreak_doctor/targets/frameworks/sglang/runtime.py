"""SGLang's own set-up, as its server runs it before it builds a model, in one
process: its world and process groups (distributed.py: a world of one, or the
traced rank of a world of N), the published launch, the model's configs.
Releases differ in these APIs; each step looks for what the installed
release has (release.py). The calls and their order: docs/design.md,
"SGLang's set-up calls".

Call inside the device (emulated or real): SGLang reads the device while it
sets up.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from graphbreak_doctor.emulation import world
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.targets.frameworks.sglang import distributed, launch
from graphbreak_doctor.targets.frameworks.sglang.release import call, optional, require, version
from graphbreak_doctor.text import one_line


@dataclass
class Runtime:
    """What the set-up made: the configs a layer is built from."""

    server_args: Any
    model_config: Any
    quant_config: Any  # None: an unquantized (bf16) model
    # The model class SGLang's registry resolved, and the architecture it matched.
    model_cls: Any = None
    architecture: str = ""
    # The model built for this set-up (forward.build_model), once it is.
    model: Any = None
    # Context managers to hold while modules are built (e.g. the shared-experts config).
    building: list[Callable[[], Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The launch: the whole argument line SGLang parsed, what it resolved that
    # decides compiling and capture, and what it logged about them.
    launch: dict[str, Any] = field(default_factory=dict)


def _dp_attention(server_args: Any, model_config: Any, log: UndoLog) -> None:
    """SGLang's data-parallel attention state, as its model runner initializes
    it after the model-parallel groups, where the release keeps that state in
    module globals that are still unset (older releases: the decoder layers'
    communicators read it while they are built; newer ones derive it from the
    published arguments). Its globals are restored on undo."""
    module = importlib.import_module("sglang.srt.layers.dp_attention")
    if getattr(module, "_ATTN_DP_SIZE", 0) is not None:
        return
    saved = {name: value for name, value in vars(module).items() if name.startswith("_") and name.isupper()}
    call(module.initialize_dp_attention, server_args=server_args, model_config=model_config)

    def restore() -> None:
        for name, value in saved.items():
            setattr(module, name, value)

    log.call_on_undo(restore)


def _publish(server_args: Any) -> None:
    """Make the server arguments the process's configuration: the runtime
    context (newer releases, which resolve the arguments here) or the global
    server arguments (older ones, which resolved them when they were made)."""
    form, publish = require("sglang.srt.runtime_context:publish",
                            "sglang.srt.server_args:set_global_server_args_for_scheduler")
    if form == 0:
        context = importlib.import_module("sglang.srt.runtime_context")
        parallel = importlib.import_module("sglang.srt.distributed.parallel_state")
        # A second set-up in this process (set_up.py, the MoE backend): the
        # group handles the first one's model-parallel groups recorded are
        # dropped by the reset, and those groups are not built again
        # (_model_parallel): they are recorded again after the publish.
        kept = {}
        if parallel.model_parallel_is_initialized():
            stamp = getattr(context.get_parallel(), "_stamp", None) or {}
            kept = {name: group for name, group in stamp.items() if name.endswith("_group")}
        context.reset_context()
        world_rank = (world.joined() or world.World(1, 0)).rank
        publish(server_args, role="scheduler",
                ranks=context.SpawnRanks(world_rank=world_rank, gpu_id=world_rank % max(1, torch.cuda.device_count())))
        if getattr(parallel, "_WORLD", None) is not None:
            kept["world_group"] = parallel._WORLD
        if kept:
            context.get_parallel().override_permanently(**kept)
    else:
        publish(server_args)


def _backend_configs(server_args: Any) -> None:
    """What SGLang's scheduler does next: resolve the MoE and GEMM backends."""
    for path in ("sglang.srt.layers.moe:initialize_moe_config",
                 "sglang.srt.layers.quantization.fp8_utils:initialize_fp8_gemm_config",
                 "sglang.srt.layers.quantization.fp4_utils:initialize_fp4_gemm_config",
                 "sglang.srt.layers.quantization.unquant:initialize_bf16_gemm_config"):
        fn = optional(path)
        if fn is None:
            continue
        fn(server_args) if inspect.signature(fn).parameters else fn()


def _expert_recorder(server_args: Any) -> None:
    """What SGLang's model runner does before it builds the model: without a
    recorder, a no-op one would be created lazily inside the traced region."""
    _, recorder = require("sglang.srt.eplb.expert_distribution:ExpertDistributionRecorder")
    _, set_recorder = require("sglang.srt.eplb.expert_distribution:set_global_expert_distribution_recorder")
    params = inspect.signature(recorder.init_new).parameters
    if "server_args" in params:
        set_recorder(recorder.init_new(server_args, None, rank=0))
    else:
        set_recorder(recorder.init_new(None, rank=0))


def model_class(model_config: Any) -> tuple[Any, str]:
    """The model class SGLang's own registry resolves for the config's
    architectures, and the architecture it matched: (class, architecture).
    An architecture the release does not serve is a TargetError with
    SGLang's own message."""
    _, resolve = require("sglang.srt.model_loader.utils:get_model_architecture")
    try:
        found = resolve(model_config)
    except (ValueError, KeyError, ImportError, AttributeError) as e:
        names = getattr(model_config.hf_config, "architectures", None)
        raise TargetError(f"SGLang {version()} cannot serve the architectures {names!r}: "
                          f"{type(e).__name__}: {one_line(str(e), 300)}") from e
    return found if isinstance(found, tuple) else (found, getattr(found, "__name__", "?"))


def _shared_experts(runtime: Runtime) -> None:
    """How many shared experts are fused into the routed kernel: decided by
    the model class (newer releases: a config held while modules are built;
    older ones: the class's own method, where it has one)."""
    model_cls = runtime.model_cls
    hf_config = runtime.model_config.hf_config
    resolve = optional("sglang.srt.layers.moe.utils:resolve_shared_experts_config")
    if resolve is not None:
        shared = resolve(model_cls, hf_config, runtime.quant_config)
        get_model = importlib.import_module("sglang.srt.runtime_context").get_model
        runtime.building.append(lambda: get_model().override(shared_experts=shared))
        return
    if not hasattr(model_cls, "determine_num_fused_shared_experts"):
        return  # a model without fused shared experts
    holder = model_cls.__new__(model_cls)  # the model without its layers: no weights
    torch.nn.Module.__init__(holder)
    holder.config, holder.quant_config = hf_config, runtime.quant_config
    holder.determine_num_fused_shared_experts()


def mem_fraction_static(rt: Runtime) -> float | None:
    """The static memory fraction the launch resolved (newer releases keep the
    resolved value in the published schedule; older ones in the arguments)."""
    schedule = optional("sglang.srt.runtime_context:get_schedule")
    value = getattr(schedule(), "mem_fraction_static", None) if schedule is not None else None
    value = value if value is not None else getattr(rt.server_args, "mem_fraction_static", None)
    return float(value) if value else None


def moe_backend() -> Any:
    return require("sglang.srt.layers.moe.utils:get_moe_runner_backend")[1]()


def set_up(config_dir: str, log: UndoLog, *, launch_args: tuple[str, ...] = (), piecewise: bool = False,
           moe_runner_backend: str | None = None, rank: int = 0) -> Runtime:
    """SGLang's set-up for the model in ``config_dir`` (config.json, and
    hf_quant_config.json where the checkpoint has one) and the user's launch arguments, parsed and resolved
    by SGLang itself (launch.py); ``piecewise``: the launch asks for the
    tc_piecewise prefill runner, and a release that lacks it or turns it off
    says so (TargetError). Undone with ``log`` where SGLang offers a teardown."""
    extra = ("--moe-runner-backend", moe_runner_backend) if moe_runner_backend else ()
    _, server_args_cls = require("sglang.srt.server_args:ServerArgs")
    with launch.sglang_log() as said, launch.rules(server_args_cls) as rules:
        server_args, argv, parser = launch.parse(server_args_cls, version(), config_dir, list(launch_args),
                                                 piecewise=piecewise, extra=extra)
        stood_in = distributed.join_world(log, server_args, rank)
        try:
            _publish(server_args)
        except (ValueError, AssertionError) as e:  # the release's own checks of the resolved launch
            raise launch.rejected(version(), f"{type(e).__name__}: {one_line(str(e), 400)}") from e
    fields = launch.resolved(server_args)
    if piecewise and launch.prefill_compiled(fields) is False:
        force = launch.forcing_flag(parser)
        why = "; ".join(said + rules) or "its resolved arguments leave tc_piecewise off"
        raise TargetError(f"SGLang {version()} does not compile the prefill with tc_piecewise for this launch: "
                          f"{why}" + (f" ({force} keeps it on)" if force else ""))
    talked = distributed.model_parallel(log, server_args)
    _backend_configs(server_args)
    _, model_config_cls = require("sglang.srt.configs.model_config:ModelConfig")
    _, load_config_cls = require("sglang.srt.configs.load_config:LoadConfig")
    _, quant_config_of = require("sglang.srt.model_loader.loader:_get_quantization_config")
    try:
        model_config = model_config_cls.from_server_args(server_args)
        quant_config = quant_config_of(model_config, load_config_cls())
    except (ValueError, TypeError, KeyError, AssertionError, AttributeError, OverflowError) as e:
        # SGLang's own reading of config.json (and the quantization it names) refused it.
        raise TargetError(f"SGLang {version()} cannot build the model in {config_dir}: "
                          f"{type(e).__name__}: {one_line(str(e), 300)}") from e
    model_cls, architecture = model_class(model_config)
    _dp_attention(server_args, model_config, log)
    _expert_recorder(server_args)
    runtime = Runtime(server_args, model_config, quant_config, model_cls=model_cls, architecture=architecture, launch={
        # The facts every framework's launch has (framework, release, resolved), then SGLang's own.
        "framework": "sglang", "release": version(), "arguments": list(launch_args), "command_line": argv,
        "resolved": fields, "phases": launch.phases(fields), "layout": distributed.layout(server_args),
        "communicators": distributed.communicators(talked, stood_in), "sglang_said": said, "sglang_rules": rules})
    _shared_experts(runtime)
    return runtime


def piecewise_state(module: torch.nn.Module, layer_id: int, quant_config: Any, tokens: int, *,
                    layer_model: torch.nn.Module | None = None, forward_batch: Any = None,
                    rt: Runtime | None = None) -> Any:
    """SGLang's tc_piecewise compile state for one layer: the flag and the
    forward context its piecewise runner sets around compiling and capturing
    (newer releases: ``tc_piecewise_cuda_graph``; older: ``piecewise_context_manager``).
    With ``layer_model`` (a stack of decoder layers), the per-layer lists are
    SGLang's own collection from it (older releases: their model runner's,
    which needs the set-up ``rt``), and ``forward_batch`` is the batch."""
    import contextlib

    form, enable = require(
        "sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph:enable_tc_piecewise_cuda_graph",
        "sglang.srt.compilation.piecewise_context_manager:enable_piecewise_cuda_graph")
    module_name = (
        "sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph",
        "sglang.srt.compilation.piecewise_context_manager",
    )[form]
    context = importlib.import_module(module_name)
    set_context = getattr(context, ("set_tc_piecewise_forward_context", "set_forward_context")[form])
    collect = optional("sglang.srt.model_executor.model_runner_components.layer_setup:"
                       "compute_attention_and_moe_layers")
    if layer_model is not None and collect is not None:
        attention, moe_layers, moe_fusions, indexers, companions = collect(layer_model)
    elif layer_model is not None:
        if rt is None:
            raise TargetError(f"SGLang {version()}'s piecewise layer lists come from its model runner: "
                              "no set-up was given to build one")
        attention, moe_layers, moe_fusions = _runner_layers(layer_model, rt)
        indexers = companions = None
    else:
        n = layer_id + 1
        attention, moe_layers, moe_fusions, indexers, companions = ([None] * n for _ in range(5))
        experts = getattr(module, "experts", None)
        if experts is not None:  # the MoE block: its experts run through the piecewise op
            moe_layers[layer_id], moe_fusions[layer_id] = experts, module
    stack = contextlib.ExitStack()
    stack.enter_context(enable())
    stack.enter_context(call(set_context, forward_batch, attention, quant_config, moe_layers, moe_fusions,
                             dsa_indexers=indexers, mha_companion_layers=companions,
                             num_tokens=tokens, raw_num_tokens=tokens))
    return stack


def _runner_layers(layer_model: torch.nn.Module, rt: Runtime) -> tuple[list, list, list]:
    """Releases without a layer-collection function: the attention layers, MoE
    blocks and MoE fusions the model runner's own ``init_piecewise_cuda_graphs``
    collects from ``layer_model``, on a runner holding only the set-up; the
    piecewise runner it would then make (capturing CUDA graphs) is not made."""
    from types import SimpleNamespace

    module = importlib.import_module("sglang.srt.model_executor.model_runner")

    class Runner(module.ModelRunner):
        def __init__(self) -> None:  # no device, no weights: only what the collection reads
            pass

    runner = Runner()
    runner.__dict__.update(model=SimpleNamespace(model=layer_model), server_args=rt.server_args,
                           model_config=rt.model_config, is_draft_worker=False, pp_size=1, device="cuda", gpu_id=0)
    made: list[Any] = []
    with UndoLog() as scoped:
        scoped.setattr(module, "PiecewiseCudaGraphRunner", made.append)
        scoped.setattr(module, "get_available_gpu_memory", lambda *args, **kwargs: 0.0)
        try:
            runner.init_piecewise_cuda_graphs()
        except Exception as e:
            raise TargetError(f"SGLang {version()}'s model runner could not collect its piecewise layers here: "
                              f"{type(e).__name__}: {one_line(str(e), 200)}") from e
    if not hasattr(runner, "attention_layers"):
        raise TargetError(f"SGLang {version()}'s model runner collected no piecewise layers for this launch")
    return runner.attention_layers, runner.moe_layers, runner.moe_fusions


def split_ops() -> list[str]:
    """The ops SGLang's piecewise runner splits the graph at, as 'ns::name'."""
    names = optional("sglang.srt.compilation.compilation_config:SPLIT_OPS") or []
    return [name.replace(".", "::", 1) for name in names]


def torch_pin() -> str:
    """The torch version the installed SGLang declares, if it pins one."""
    for requirement in importlib.metadata.requires("sglang") or []:
        name, _, spec = requirement.partition("==")
        if name.strip() == "torch" and spec and ";" not in spec:
            return spec.strip()
    return ""

"""``--layer dense|moe|all``: GLM-5-NVFP4 decoder layers at real shapes, with
their own options (``--config``, ``--tokens``, ``--tp``, ``--impl``, ``--cold``).

``--impl`` chooses whose code is traced: ``sglang`` builds SGLang's own
modules (targets/glm5/sglang/), ``reference`` the project's re-creation of the
layer, which calls FlashInfer directly (builder.py). The default is sglang
when SGLang is installed.
"""

from __future__ import annotations

import dataclasses

import shlex
from typing import Any, Mapping

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.targets.glm5.sglang import PHASES
from graphbreak_doctor.targets.provider import Option, Selection, TargetProvider

LAYER_CHOICES = ("dense", "moe", "all")
IMPL_CHOICES = ("sglang", "reference")
DEFAULT_TOKENS = 128
DEFAULT_TP = 1
REFERENCE_NOTE = ("implementation: graphbreak-doctor's re-creation of SGLang's layer, calling FlashInfer directly "
                  "(--impl reference; what code that calls FlashInfer's wrappers itself sees)")
ALL_NOTE = "--layer all traces one dense and one MoE layer; the other 76 decoder layers run the same code"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"expected an integer >= 1, got {text!r}")
    return value


def launch_arguments(text: str | None, config: str | None) -> tuple[tuple[str, ...], str | None]:
    """``--sglang-args`` split as a shell does, and the config folder: the
    user's ``--model-path``, if given, is the model's config (and --config
    is then left out)."""
    if text is None:
        return (), config
    try:
        args = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"--sglang-args: {e} in {text!r}") from e
    if not args:
        raise ValueError("--sglang-args is empty: give SGLang's launch arguments, or leave it out")
    model_path = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--model-path":
            if i + 1 >= len(args):
                raise ValueError(f"--sglang-args: {arg} needs a value")
            model_path, i = args[i + 1], i + 2
            continue
        if arg.startswith("--model-path="):
            model_path = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    if model_path is not None:
        if config is not None:
            raise ValueError("--sglang-args names --model-path and --config names another: give one")
        config = model_path
    return tuple(rest), config


def _first_layer(loaded: Any, kind: str) -> int:
    """The first decoder layer of ``kind`` (dense, moe), or a ValueError
    (exit 2) naming the config values that leave the model none."""
    indices = loaded.layer_indices(kind)
    if not indices:
        values = ", ".join(f"{k}={loaded.values.get(k)!r}" for k in
                           ("num_hidden_layers", "first_k_dense_replace", "moe_layer_freq", "n_routed_experts"))
        raise ValueError(f"{loaded.path}: the model has no {kind} layer ({values})")
    return indices[0]


class Glm5Provider(TargetProvider):
    name = "glm5"
    title = "GLM-5-NVFP4 decoder layers"
    options = (
        Option("--layer", "a GLM-5-NVFP4 decoder layer (all = one dense + one MoE)", choices=LAYER_CHOICES,
               selects=True),
        Option("--config", "GLM-5 config.json (or its folder) of the same architecture "
                           "(default: the config shipped with graphbreak-doctor)", metavar="PATH"),
        Option("--tokens", f"tokens in the batch (default {DEFAULT_TOKENS})", metavar="N", type=positive_int),
        Option("--tp", f"tensor-parallel size: per-rank shard shapes (default {DEFAULT_TP}; --impl reference)",
               metavar="N", type=positive_int),
        Option("--impl", "whose code: sglang = SGLang's own modules in its compile state, reference = the "
                         "project's re-creation calling FlashInfer directly (default: sglang when installed)",
               choices=IMPL_CHOICES),
        Option("--cold", "--impl sglang: skip SGLang's eager warm-up before tracing", switch=True),
        Option("--whole-layer", "--impl sglang: the whole decoder layer (norms, MLA attention with the DSA "
                                "indexer, MLP or MoE) called with a ForwardBatch, not only the MLP block",
               switch=True),
        Option("--model", "SGLang's GLM-5 model forward with its layers cut to one of each kind, as SGLang's "
                          "piecewise runner compiles it (--impl sglang)", switch=True, selects=True),
        Option("--forward", "--whole-layer / --model: the batch, extend (prefill; default) or decode",
               choices=PHASES),
        Option("--sglang-args", "--impl sglang: the server's launch arguments (what follows "
                                "`python -m sglang.launch_server`), read by the installed SGLang itself; "
                                "--model-path defaults to the GLM-5-NVFP4 config (--config)", metavar="ARGS",
               command_line=True),
    )

    def select(self, options: Mapping[str, Any]) -> list[Selection]:
        from graphbreak_doctor.targets.glm5 import sglang

        layer = options.get("layer")
        model = bool(options.get("model"))
        if model and layer:
            raise ValueError("--model traces the model's forward: leave out --layer")
        if not model and options.get("forward") and not options.get("whole_layer"):
            raise ValueError("--forward applies to --whole-layer and --model")
        if (model or options.get("whole_layer")) and options.get("impl") == "reference":
            raise ValueError("--whole-layer and --model trace SGLang's own modules: they need --impl sglang")
        if model and options.get("whole_layer"):
            raise ValueError("--model already traces whole layers: leave out --whole-layer")
        impl = options.get("impl") or ("sglang" if sglang.available() else "reference")
        if (model or options.get("whole_layer")) and impl != "sglang":
            raise ValueError("--whole-layer and --model need SGLang installed (see docs/sglang-glm5.md)")
        if impl == "sglang":
            if not sglang.available():
                raise ValueError("--impl sglang needs SGLang installed (see docs/sglang-glm5.md)")
            if (options.get("tp") or DEFAULT_TP) != 1:
                raise ValueError("--tp applies to --impl reference: SGLang's tensor parallelism needs one process per rank")
        elif options.get("cold"):
            raise ValueError("--cold applies to --impl sglang (the reference layer has no warm-up)")
        scope = "model" if model else "layer" if options.get("whole_layer") else "block"
        given = options.get("sglang_args") is not None  # --model-path alone leaves no other argument
        if given and not sglang.available():
            raise ValueError("--sglang-args needs SGLang installed: SGLang itself reads them")
        launch, config = launch_arguments(options.get("sglang_args"), options.get("config"))
        if given and impl != "sglang":
            raise ValueError("--sglang-args applies to --impl sglang (SGLang reads them)")
        return self.layer_selections("model" if model else layer, impl, config=config,
                                     tokens=options.get("tokens"), tp=options.get("tp"), cold=bool(options.get("cold")),
                                     scope=scope, phase=options.get("forward") or "extend", launch=launch)

    def at_size(self, selection: Selection, size: int) -> Selection | None:
        """The same layer or model with ``size`` tokens in its batch."""
        return dataclasses.replace(selection, name=f"{selection.name}-tokens-{size}",
                                   options={**selection.options, "tokens": size})

    def builds_again_in_process(self, selection: Selection) -> bool:
        """SGLang's decoder layer and model load through its model loader,
        into one set of process-wide state (forward context, MoE flags): a
        second load in the same process is refused by SGLang or changes the
        first; blocks and the reference layers build again safely."""
        return selection.options.get("scope", "block") == "block"

    def server_sizes(self, selection: Selection, info: Any) -> tuple[list[int], str]:
        """What SGLang's resolved launch arguments compile the traced phase
        at: the prefill's capture sizes (its piecewise or tc_piecewise
        runner's token list) where the launch compiles the prefill forward,
        the CUDA-graph batch sizes up to torch.compile's limit where it
        compiles the decode forward (--enable-torch-compile)."""
        launch = (info.facts or {}).get("launch") or {}
        resolved = launch.get("resolved") or {}
        phases = launch.get("phases") or {}
        graphs = resolved.get("cuda_graph_config") or {}
        phase = selection.options.get("phase") or "extend"
        if phase == "extend" and "torch.compile" in str(phases.get("extend", "")):
            prefill = graphs.get("prefill") or {}
            sizes = prefill.get("bs") or resolved.get("piecewise_cuda_graph_tokens") or []
            if sizes:
                return ([int(n) for n in sizes], "SGLang's prefill capture sizes (the resolved launch arguments' "
                        + ("cuda_graph_config.prefill.bs" if prefill.get("bs") else "piecewise_cuda_graph_tokens") + ")")
        if resolved.get("enable_torch_compile"):
            limit = int(resolved.get("torch_compile_max_bs") or 0)
            decode = (graphs.get("decode") or {}).get("bs") or resolved.get("cuda_graph_bs") or []
            sizes = [int(n) for n in decode if not limit or int(n) <= limit]
            if sizes:
                return sizes, ("SGLang's CUDA-graph batch sizes up to torch_compile_max_bs "
                               "(--enable-torch-compile, the resolved launch arguments)")
        return [], ""

    def cell_label(self, selection: Selection) -> str:
        """A GLM-5 cell is its layer (dense, moe) or the model."""
        return selection.options["kind"]

    def layer_selections(self, layer: str, impl: str, *, config: str | None = None, tokens: int | None = None,
                         tp: int | None = None, cold: bool = False, scope: str = "block",
                         phase: str = "extend", launch: tuple[str, ...] = ()) -> list[Selection]:
        """The selections of ``--layer`` for ``impl``, whether or not this
        environment can build them (a matrix cell runs in another one)."""
        from graphbreak_doctor.targets.glm5.config import load_config

        from graphbreak_doctor.targets.glm5.config import check_tp

        # Read now, so a bad --config (or a --tp it cannot shard) is a usage
        # error before anything is traced.
        loaded = load_config(config)
        if scope == "block" and impl == "reference":
            check_tp(loaded, tp or DEFAULT_TP)
        kinds = ["dense", "moe"] if layer == "all" else [layer]
        if scope != "block":
            return [self._stack_selection(kind, impl, loaded, tokens=tokens, cold=cold, scope=scope, phase=phase,
                                          all=layer == "all", launch=launch) for kind in kinds]
        common = {
            "config": loaded.path,
            "tokens": tokens or DEFAULT_TOKENS,
            "tp": tp or DEFAULT_TP,
            "all": layer == "all",
            "impl": impl,
            "cold": cold,
            "launch": list(launch),
        }
        prefix = "glm5-sglang" if impl == "sglang" else "glm5"
        return [Selection(self.name, f"{prefix}-{kind}", {"kind": kind, **common},
                          spec=f"{prefix}:{kind}:{_first_layer(loaded, kind)}") for kind in kinds]

    def _stack_selection(self, kind: str, impl: str, loaded: Any, *, tokens: int | None, cold: bool, scope: str,
                         phase: str, all: bool, launch: tuple[str, ...]) -> Selection:
        options = {"kind": kind, "config": loaded.path, "tokens": tokens or DEFAULT_TOKENS, "tp": DEFAULT_TP,
                   "all": all, "impl": impl, "cold": cold, "scope": scope, "phase": phase, "launch": list(launch),
                   # The model's forward: its compile map too (the regions each phase enters).
                   "compile_map": kind == "model"}
        if kind == "model":
            return Selection(self.name, f"glm5-sglang-model-{phase}", options, spec=f"glm5-sglang:model:{phase}")
        index = _first_layer(loaded, kind)
        return Selection(self.name, f"glm5-sglang-{kind}-layer-{phase}", options,
                         spec=f"glm5-sglang:{kind}:{index}:layer:{phase}")

    def build(self, selection: Selection, device: str, log: UndoLog) -> Target:
        o = selection.options
        try:
            if o.get("impl") == "sglang":
                from graphbreak_doctor.targets.glm5.sglang import builder as sglang

                target = sglang.build_layer(o["kind"], config=o["config"], tokens=o["tokens"], device=device,
                                            cold=o["cold"], log=log, scope=o.get("scope", "block"),
                                            phase=o.get("phase", "extend"), launch_args=tuple(o.get("launch", ())))
            else:
                from graphbreak_doctor.targets.glm5 import builder as glm5

                target = glm5.build_layer(o["kind"], config=o["config"], tokens=o["tokens"], tp=o["tp"],
                                          device=device)
                target.info.facts["impl"] = "reference"
                target.info.notes.insert(0, REFERENCE_NOTE)
        except ValueError as e:
            raise TargetError(str(e)) from e
        if o.get("all"):
            target.info.notes.append(ALL_NOTE)
        return target


PROVIDER = Glm5Provider()

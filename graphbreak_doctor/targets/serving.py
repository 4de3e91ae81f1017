"""The served models: ``--layer dense|moe|all``, GLM-5-NVFP4's decoder layers
at real shapes, and ``--model``, a served model's forward reduced to one
decoder layer of each kind, with their own options (``--config``,
``--model-path``, ``--tokens``, ``--tp``, ``--impl``, ``--cold``).

``--impl`` chooses whose code is traced: ``sglang`` builds SGLang's own
modules (the SGLang framework, targets/frameworks/sglang/), ``reference`` the
project's re-creation of GLM-5's layer, which calls FlashInfer directly
(targets/models/glm5/builder.py). The default is sglang when SGLang is
installed. ``--model-path`` (or ``--sglang-args "--model-path DIR"``) names
the served model: a config folder (read by targets/model_folder.py, then
by SGLang itself) or a packaged model (targets/models/packaged.py); a model
other than GLM-5 is traced as its model forward only.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from typing import Any, Mapping

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.targets.frameworks.sglang import PHASES
from graphbreak_doctor.targets.provider import Option, Selection, TargetProvider, pick_sizes

GLM5_ARCHITECTURE = "GlmMoeDsaForCausalLM"
GLM5_NAME = f"GLM-5 ({GLM5_ARCHITECTURE})"
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
    args = _split(text, "--sglang-args", "give SGLang's launch arguments, or leave it out")
    model_path, rest = _take_value(args, "--model-path", "--sglang-args")
    if model_path is not None:
        if config is not None:
            raise ValueError("--sglang-args names --model-path and --config names another: give one")
        config = model_path
    return tuple(rest), config


def _split(text: str, option: str, empty: str) -> list[str]:
    """``option``'s launch arguments split as a shell does; one line when they
    do not split or hold none (``empty`` says what to give)."""
    try:
        args = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"{option}: {e} in {text!r}") from e
    if not args:
        raise ValueError(f"{option} is empty: {empty}")
    return args


def _take_value(args: list[str], flag: str, option: str) -> tuple[str | None, list[str]]:
    """The value of ``flag`` in ``args`` (``flag VALUE`` or ``flag=VALUE``;
    the last one given), and the other arguments, in order."""
    value, rest, i = None, [], 0
    while i < len(args):
        arg = args[i]
        if arg == flag:
            if i + 1 >= len(args):
                raise ValueError(f"{option}: {arg} needs a value")
            value, i = args[i + 1], i + 2
            continue
        if arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return value, rest


def _vllm_sizes(resolved: dict[str, Any]) -> tuple[list[int], str]:
    """A vLLM launch compiles its forward once, dynamically, over its compile
    ranges, and captures CUDA graphs at its capture sizes: both ends of each
    range, and the smallest, a middle and the largest capture size."""
    if resolved.get("mode") in (None, "NONE"):
        return [], ""
    ends = sorted({int(n) for r in resolved.get("compile_ranges") or [] for n in re.findall(r"\d+", str(r))})
    captured = pick_sizes([int(n) for n in resolved.get("cudagraph_capture_sizes") or []])
    if not ends and not captured:
        return [], ""
    return (sorted(set(ends) | set(captured)),
            "vLLM's compile range ends and the smallest, a middle and the largest of its CUDA-graph capture sizes "
            "(the resolved launch)")


def vllm_launch_arguments(text: str, config: str | None) -> tuple[tuple[str, ...], str | None]:
    """``--vllm-args`` split as a shell does, and the config folder: the
    model vLLM is given (``vllm serve MODEL`` or ``--model MODEL``), if any,
    is the model's config (and --config is then left out). A file of
    further arguments inside them is refused (vllm.launch.refuse_config_file)."""
    from graphbreak_doctor.targets.frameworks.vllm.launch import refuse_config_file

    args = _split(text, "--vllm-args", "give vLLM's launch arguments (what follows `vllm serve`)")
    refuse_config_file(args)
    model = None
    if not args[0].startswith("-"):  # vllm serve MODEL ...
        model, args = args[0], args[1:]
    given, rest = _take_value(args, "--model", "--vllm-args")
    model = given if given is not None else model
    if model is not None:
        if config is not None:
            raise ValueError("--vllm-args names a model and --config names another: give one")
        config = model
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
    title = "served models: GLM-5-NVFP4's decoder layers, any model's forward"
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
        Option("--whole-layer", "--impl sglang: the whole decoder layer (norms, MLA attention with the DSA "
                                "indexer, MLP or MoE) called with a ForwardBatch, not only the MLP block",
               switch=True),
        Option("--model", "the served model's forward as SGLang builds it (GLM-5-NVFP4 unless --model-path), its "
                          "layers cut to one of each kind, as SGLang's piecewise runner compiles it (--impl sglang)",
               switch=True, selects=True),
        Option("--forward", "--whole-layer / --model: the batch, extend (prefill; default) or decode",
               choices=PHASES),
        Option("--model-path", lambda: "--impl sglang: the served model's config folder (config.json, and "
                                       "hf_quant_config.json where it has one), or a packaged model: "
                                       f"{packaged_listing()}; alone it selects the model forward (--model)",
               metavar="DIR|NAME", selects=True),
        Option("--sglang-args", "--impl sglang: the server's launch arguments (what follows "
                                "`python -m sglang.launch_server`), read by the installed SGLang itself; "
                                "--model-path defaults to the GLM-5-NVFP4 config (--config)", metavar="ARGS",
               command_line=True),
        Option("--vllm-args", "the server's launch arguments for vLLM (what follows `vllm serve`), read and resolved "
                              "by the installed vLLM itself: the model forward as vLLM builds and compiles it; the "
                              "model defaults to the GLM-5-NVFP4 config (or give it as vLLM does, or --model-path)",
               metavar="ARGS", command_line=True, selects=True),
    )

    def select(self, options: Mapping[str, Any]) -> list[Selection]:
        from graphbreak_doctor.targets.frameworks import sglang

        if options.get("vllm_args") is not None:
            return [self._vllm_selection(options)]
        launch, config = launch_arguments(options.get("sglang_args"), options.get("config"))
        if options.get("model_path") is not None:
            if config is not None:
                raise ValueError("--model-path names the model, and --config or --sglang-args' --model-path "
                                 "another: give one")
            config = options["model_path"]
        # The model's folder is read first: a bad one is one line, whatever else is installed.
        config = packaged_or_path(config)
        other = _other_model(config)
        layer = options.get("layer")
        # --model-path alone asks for the model forward (the one scope any model has).
        model = bool(options.get("model")) or (options.get("model_path") is not None and not layer)
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
        scope = "model" if model else "layer" if options.get("whole_layer") else "block"
        given = options.get("sglang_args") is not None  # --model-path alone leaves no other argument
        if given and not sglang.available():
            raise ValueError("--sglang-args needs SGLang installed: SGLang itself reads them")
        if given and impl != "sglang":
            raise ValueError("--sglang-args applies to --impl sglang (SGLang reads them)")
        return self._selections("model" if model else layer, impl, config, other, tokens=options.get("tokens"),
                                tp=options.get("tp"), cold=bool(options.get("cold")), scope=scope,
                                phase=options.get("forward") or "extend", launch=launch)

    def _vllm_selection(self, options: Mapping[str, Any]) -> Selection:
        """``--vllm-args``: the model forward as the installed vLLM builds
        and compiles it for that launch."""
        from graphbreak_doctor.targets.frameworks import vllm

        if options.get("sglang_args") is not None:
            raise ValueError("--vllm-args and --sglang-args launch two frameworks: give one")
        for flag, key in (("--layer", "layer"), ("--whole-layer", "whole_layer"), ("--impl", "impl"),
                          ("--forward", "forward"), ("--tp", "tp")):
            if options.get(key):
                raise ValueError(f"--vllm-args traces the model's forward as vLLM compiles it: leave out {flag}")
        launch, config = vllm_launch_arguments(options["vllm_args"], options.get("config"))
        if options.get("model_path") is not None:
            if config is not None:
                raise ValueError("--model-path names the model, and --config or --vllm-args' model another: give one")
            config = options["model_path"]
        if not vllm.available():
            raise ValueError("--vllm-args needs vLLM installed: vLLM itself reads them (see docs/vllm.md)")
        return self.vllm_selection(config, launch, tokens=options.get("tokens"))

    def vllm_selection(self, config: str | None, launch: tuple[str, ...], *, tokens: int | None = None) -> Selection:
        """The model in ``config`` (a folder, a packaged model's name; None:
        GLM-5-NVFP4) as vLLM serves it under ``launch``, whether or not this
        environment has vLLM (a matrix cell runs in another one)."""
        from pathlib import Path

        from graphbreak_doctor.targets.model_folder import read_model_folder
        from graphbreak_doctor.targets.models.glm5.config import load_config

        config = packaged_or_path(config)
        folder = read_model_folder(config if config is not None else str(Path(load_config(None).path).parent))
        arch = folder.architectures[0]
        slug = re.sub(r"forcausallm$", "", re.sub(r"[^a-z0-9]", "", arch.lower())) or "model"
        directory = folder.path if os.path.isdir(folder.path) else os.path.dirname(folder.path)
        name = GLM5_NAME if arch == GLM5_ARCHITECTURE else arch
        options = {"framework": "vllm", "kind": "model", "config": directory, "tokens": tokens, "scope": "model",
                   "launch": list(launch), "compile_map": True, "served": {"name": name, "spec": f"{slug}-vllm"}}
        return Selection(self.name, f"{slug}-vllm-model", options, spec=f"{slug}-vllm:model")

    def served_selections(self, layer: str, impl: str, *, config: str | None = None, tokens: int | None = None,
                          tp: int | None = None, cold: bool = False, scope: str = "block", phase: str = "extend",
                          launch: tuple[str, ...] = ()) -> list[Selection]:
        """The selections for the model in ``config`` (a folder, a packaged
        model's name; None: GLM-5-NVFP4): GLM-5's layers and model, or
        another model's forward; whether or not this environment can build
        them (a matrix cell runs in another one)."""
        config = packaged_or_path(config)
        return self._selections(layer, impl, config, _other_model(config), tokens=tokens, tp=tp, cold=cold,
                                scope=scope, phase=phase, launch=launch)

    def _selections(self, layer: str, impl: str, config: str | None, other: Any, *, tokens: int | None,
                    tp: int | None, cold: bool, scope: str, phase: str, launch: tuple[str, ...]) -> list[Selection]:
        """served_selections for a config already read (``other``: its
        folder when it is not GLM-5's)."""
        if other is not None:
            return [self.any_model_selection(other, impl=impl, scope=scope, tokens=tokens, cold=cold, phase=phase,
                                             launch=launch)]
        return self.layer_selections(layer, impl, config=config, tokens=tokens, tp=tp, cold=cold, scope=scope,
                                     phase=phase, launch=launch)

    def any_model_selection(self, folder: Any, *, impl: str, scope: str, tokens: int | None, cold: bool,
                            phase: str, launch: tuple[str, ...]) -> Selection:
        """The model forward of a model other than GLM-5 (its config folder
        read: targets/model_folder.py), as SGLang builds it from the folder."""
        arch = folder.architectures[0]
        if impl != "sglang":
            raise ValueError(f"{folder.path}: {arch} is traced as SGLang builds it: it needs --impl sglang")
        if scope != "model":
            raise ValueError(f"{folder.path}: --layer and --whole-layer trace GLM-5's layers; for {arch} give --model "
                             "(its forward with one decoder layer of each kind)")
        slug = re.sub(r"forcausallm$", "", re.sub(r"[^a-z0-9]", "", arch.lower())) or "model"
        options = {"kind": "model", "config": folder.path, "tokens": tokens or DEFAULT_TOKENS, "tp": DEFAULT_TP,
                   "all": False, "impl": "sglang", "cold": cold, "scope": "model", "phase": phase,
                   "launch": list(launch), "compile_map": True, "served": {"name": arch, "spec": f"{slug}-sglang"}}
        return Selection(self.name, f"{slug}-sglang-model-{phase}", options, spec=f"{slug}-sglang:model:{phase}")

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
        if selection.options.get("framework") == "vllm":
            return _vllm_sizes(resolved)
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

    def sizes_to_prove(self, selection: Selection, sizes: list[int]) -> list[int]:
        """A vLLM launch's sizes are already the ones to prove at (``_vllm_sizes``)."""
        return sorted(set(sizes)) if selection.options.get("framework") == "vllm" else pick_sizes(sizes)

    def cell_label(self, selection: Selection) -> str:
        """A GLM-5 cell is its layer (dense, moe) or the model."""
        return selection.options["kind"]

    def layer_selections(self, layer: str, impl: str, *, config: str | None = None, tokens: int | None = None,
                         tp: int | None = None, cold: bool = False, scope: str = "block",
                         phase: str = "extend", launch: tuple[str, ...] = ()) -> list[Selection]:
        """The selections of ``--layer`` for ``impl``, whether or not this
        environment can build them (a matrix cell runs in another one)."""
        from graphbreak_doctor.targets.models.glm5.config import load_config

        from graphbreak_doctor.targets.models.glm5.config import check_tp

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
            if o.get("framework") == "vllm":
                from graphbreak_doctor.targets.frameworks.vllm.builder import Served as VllmServed
                from graphbreak_doctor.targets.frameworks.vllm.builder import build_model

                served = VllmServed(config_dir=o["config"], name=o["served"]["name"], spec=o["served"]["spec"],
                                    provider=self.name, facts={"config": o["config"]})
                return build_model(served, device=device, log=log, launch_args=tuple(o.get("launch", ())),
                                   tokens=o.get("tokens"))
            if o.get("impl") == "sglang":
                from graphbreak_doctor.targets.frameworks.sglang import builder as sglang

                served = _served(o["kind"], o["config"], o.get("served"))
                target = sglang.build_layer(o["kind"], served=served, tokens=o["tokens"],
                                            device=device, cold=o["cold"], log=log, scope=o.get("scope", "block"),
                                            phase=o.get("phase", "extend"), launch_args=tuple(o.get("launch", ())))
            else:
                from graphbreak_doctor.targets.models.glm5 import builder as glm5

                target = glm5.build_layer(o["kind"], config=o["config"], tokens=o["tokens"], tp=o["tp"],
                                          device=device)
                target.info.facts["impl"] = "reference"
                target.info.notes.insert(0, REFERENCE_NOTE)
        except ValueError as e:
            raise TargetError(str(e)) from e
        if o.get("all"):
            target.info.notes.append(ALL_NOTE)
        return target


def packaged_listing() -> str:
    """The packaged models' names, for help and error texts (read from the
    model packages' declarations: targets/models/packaged.py)."""
    from graphbreak_doctor.targets.models.packaged import listing

    return listing()


def packaged_or_path(config: str | None) -> str | None:
    """A packaged model's name (``deepseek-v3``) as its config folder; any
    other value is a path, as given (a folder of that name wins). A bare
    name that is neither is a ValueError naming the packaged models."""
    from graphbreak_doctor.targets.models.packaged import config_dir

    if config is None or os.path.exists(config) or os.sep in config:
        return config
    found = config_dir(config)
    if found is None:
        raise ValueError(f"{config!r} is neither a model folder nor a packaged model: {packaged_listing()}")
    return str(found)


def _other_model(config: str | None) -> Any:
    """The config folder read (targets/model_folder.py) when it holds a model
    other than GLM-5 (which its own reader checks); None for GLM-5."""
    from graphbreak_doctor.targets.model_folder import read_model_folder

    if config is None:
        return None
    folder = read_model_folder(config)
    return None if GLM5_ARCHITECTURE in folder.architectures else folder


def _served(kind: str, config: str, other: dict | None = None) -> Any:
    """The model as the SGLang framework builds it: its config folder, name,
    and for one GLM-5 layer kind its first layer and the run of the same kind."""
    from pathlib import Path

    from graphbreak_doctor.targets.frameworks.sglang.builder import Served
    from graphbreak_doctor.targets.models.glm5.config import load_config

    if other is not None:
        folder = config if os.path.isdir(config) else os.path.dirname(config)
        return Served(config_dir=folder, name=other["name"], spec=other["spec"], provider="glm5",
                      facts={"config": config})

    cfg = load_config(config)
    same = cfg.layer_indices("moe" if kind == "model" else kind)
    return Served(config_dir=str(Path(cfg.path).parent), name=GLM5_NAME, spec="glm5-sglang", provider="glm5",
                  index=same[0], same=tuple(same), facts={"config": cfg.path, "quant_profile": cfg.quant.path},
                  shapes={"hidden_size": cfg.hidden_size})


PROVIDER = Glm5Provider()

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
other than GLM-5 is traced as its model forward only. What is GLM-5's own
(its layers by kind, the re-created layer, its served record) lives with
its model data (targets/models/glm5/served.py) and is imported only where
GLM-5 is the model; each framework is asked through the framework registry
(targets/frameworks/registry.py).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Any, Mapping

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.targets.frameworks import registry
from graphbreak_doctor.targets.frameworks.framework import Build, Framework, Served
from graphbreak_doctor.targets.provider import Option, Selection, TargetProvider, pick_sizes

LAYER_CHOICES = ("dense", "moe", "all")
# The frameworks that build GLM-5's layers (and their blocks), then the
# project's re-creation of the layer.
LAYER_FRAMEWORKS = tuple(f for f in registry.FRAMEWORKS if "block" in f.scopes)
REFERENCE = "reference"
IMPL_CHOICES = (*(f.name for f in LAYER_FRAMEWORKS), REFERENCE)
# The phases of a served model's forward (--forward): the layer framework's.
PHASES = tuple(dict.fromkeys(p for f in LAYER_FRAMEWORKS for p in f.phases))
DEFAULT_TOKENS = 128
DEFAULT_TP = 1


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"expected an integer >= 1, got {text!r}")
    return value


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
        # Each framework's launch arguments (--sglang-args, --vllm-args): its own option.
        *(f.launch_option() for f in registry.FRAMEWORKS),
    )

    def select(self, options: Mapping[str, Any]) -> list[Selection]:
        given = registry.given(options)
        if len(given) > 1:
            raise ValueError(f"{given[-1].option} and {given[0].option} launch two frameworks: give one")
        if given and "block" not in given[0].scopes:
            return [self._model_only_selection(given[0], options)]
        layered = given[0] if given else (LAYER_FRAMEWORKS[0] if LAYER_FRAMEWORKS else None)
        option = layered.option if layered else ""
        launch, config = (layered.split_launch(options[layered.option_name], options.get("config"))
                          if given else ((), options.get("config")))
        if options.get("model_path") is not None:
            if config is not None:
                raise ValueError(f"--model-path names the model, and --config or {option}' --model-path "
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
        named = layered.name if layered else REFERENCE
        title = layered.title if layered else ""
        if (model or options.get("whole_layer")) and options.get("impl") == REFERENCE:
            raise ValueError(f"--whole-layer and --model trace {title}'s own modules: they need --impl {named}")
        if model and options.get("whole_layer"):
            raise ValueError("--model already traces whole layers: leave out --whole-layer")
        impl = options.get("impl") or (named if layered and layered.available() else REFERENCE)
        framework = registry.get(impl) if impl != REFERENCE else None
        if (model or options.get("whole_layer")) and framework is None:
            raise ValueError(f"--whole-layer and --model need {title} installed "
                             f"(see {layered.docs if layered else 'docs/sglang-glm5.md'})")
        if framework is not None:
            if not framework.available():
                raise ValueError(f"--impl {impl} needs {framework.title} installed (see {framework.docs})")
            if (options.get("tp") or DEFAULT_TP) != 1:
                raise ValueError(f"--tp applies to --impl reference: {framework.title}'s tensor parallelism needs "
                                 "one process per rank")
        scope = "model" if model else "layer" if options.get("whole_layer") else "block"
        if given and not layered.available():
            raise ValueError(f"{option} needs {title} installed: {title} itself reads them")
        if given and framework is not layered:
            raise ValueError(f"{option} applies to --impl {named} ({title} reads them)")
        return self._selections("model" if model else layer, impl, config, other, tokens=options.get("tokens"),
                                tp=options.get("tp"), cold=bool(options.get("cold")), scope=scope,
                                phase=options.get("forward") or PHASES[0], launch=launch)

    def _model_only_selection(self, framework: Framework, options: Mapping[str, Any]) -> Selection:
        """``--<name>-args`` of a framework that builds the model forward
        only (vLLM): the model forward as the installed framework builds and
        compiles it for that launch."""
        option = framework.option
        for flag, key in (("--layer", "layer"), ("--whole-layer", "whole_layer"), ("--impl", "impl"),
                          ("--forward", "forward"), ("--tp", "tp")):
            if options.get(key):
                raise ValueError(f"{option} traces the model's forward as {framework.title} compiles it: "
                                 f"leave out {flag}")
        launch, config = framework.split_launch(options[framework.option_name], options.get("config"))
        if options.get("model_path") is not None:
            if config is not None:
                raise ValueError(f"--model-path names the model, and --config or {option}' model another: give one")
            config = options["model_path"]
        if not framework.available():
            raise ValueError(f"{option} needs {framework.title} installed: {framework.title} itself reads them "
                             f"(see {framework.docs})")
        return self.model_selection(framework, config, launch, tokens=options.get("tokens"))

    def model_selection(self, framework: Framework | str, config: str | None, launch: tuple[str, ...], *,
                        tokens: int | None = None) -> Selection:
        """The model in ``config`` (a folder, a packaged model's name; None:
        GLM-5-NVFP4) as ``framework`` serves it under ``launch``, whether or
        not this environment has it (a matrix cell runs in another one)."""
        from graphbreak_doctor.targets.model_folder import read_model_folder

        name = framework if isinstance(framework, str) else framework.name
        config = packaged_or_path(config)
        folder = read_model_folder(config if config is not None else _glm5().default_folder())
        arch = folder.architectures[0]
        slug = _slug(arch)
        directory = folder.path if os.path.isdir(folder.path) else os.path.dirname(folder.path)
        served = _glm5().NAME if _is_glm5(folder) else arch
        options = {"framework": name, "kind": "model", "config": directory, "tokens": tokens, "scope": "model",
                   "launch": list(launch), "compile_map": True,
                   "served": {"name": served, "spec": f"{slug}-{name}"}}
        return Selection(self.name, f"{slug}-{name}-model", options, spec=f"{slug}-{name}:model")

    def matrix_model_selections(self, framework: Framework | str, config: str | None,
                                launch: tuple[str, ...]) -> list[Selection]:
        """The model forward a matrix cell maps, as ``trace`` selects it for
        the framework's launch: a framework that builds layers too through the
        served model's own selections, one that builds the model forward only
        by its model selection; whether or not this environment has it."""
        framework = registry.get(framework) if isinstance(framework, str) else framework
        if "block" not in framework.scopes:
            return [self.model_selection(framework, config, launch)]
        return self.served_selections("model", framework.name, config=config, scope="model", launch=launch)

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
        if impl == REFERENCE:
            layered = LAYER_FRAMEWORKS[0]
            raise ValueError(f"{folder.path}: {arch} is traced as {layered.title} builds it: it needs "
                             f"--impl {layered.name}")
        if scope != "model":
            raise ValueError(f"{folder.path}: --layer and --whole-layer trace GLM-5's layers; for {arch} give --model "
                             "(its forward with one decoder layer of each kind)")
        slug = _slug(arch)
        options = {"kind": "model", "config": folder.path, "tokens": tokens or DEFAULT_TOKENS, "tp": DEFAULT_TP,
                   "all": False, "impl": impl, "framework": impl, "cold": cold, "scope": "model", "phase": phase,
                   "launch": list(launch), "compile_map": True, "served": {"name": arch, "spec": f"{slug}-{impl}"}}
        return Selection(self.name, f"{slug}-{impl}-model-{phase}", options, spec=f"{slug}-{impl}:model:{phase}")

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
        """What the framework's resolved launch compiles the traced phase at
        (its ``server_sizes``); nothing for the reference layer."""
        framework = registry.of(selection.options)
        launch = (info.facts or {}).get("launch") or {}
        if framework is None:
            return [], ""
        return framework.server_sizes(launch, selection.options.get("phase") or framework.phases[0])

    def sizes_to_prove(self, selection: Selection, sizes: list[int]) -> list[int]:
        framework = registry.of(selection.options)
        return framework.sizes_to_prove(sizes) if framework is not None else pick_sizes(sizes)

    def cell_label(self, selection: Selection) -> str:
        """A GLM-5 cell is its layer (dense, moe) or the model."""
        return selection.options["kind"]

    def layer_selections(self, layer: str, impl: str, *, config: str | None = None, tokens: int | None = None,
                         tp: int | None = None, cold: bool = False, scope: str = "block",
                         phase: str = "extend", launch: tuple[str, ...] = ()) -> list[Selection]:
        """The selections of ``--layer`` for ``impl``, whether or not this
        environment can build them (a matrix cell runs in another one):
        GLM-5's own (targets/models/glm5/served.py)."""
        return _glm5().layer_selections(self.name, layer, impl, framework=impl != REFERENCE, config=config,
                                        tokens=tokens or DEFAULT_TOKENS, tp=tp or DEFAULT_TP, cold=cold, scope=scope,
                                        phase=phase, launch=launch)

    def build(self, selection: Selection, device: str, log: UndoLog) -> Target:
        o = selection.options
        framework = registry.of(o)
        try:
            if framework is not None:
                what = Build(kind=o["kind"], tokens=o.get("tokens"), cold=bool(o.get("cold")),
                             scope=o.get("scope", "block"), phase=o.get("phase") or "",
                             launch=tuple(o.get("launch", ())))
                target = framework.build(self._served(framework, o), what, device=device, log=log)
            else:
                target = _glm5().build_reference(o, device)
        except ValueError as e:
            raise TargetError(str(e)) from e
        if o.get("all"):
            target.info.notes.append(_glm5().ALL_NOTE)
        return target

    def _served(self, framework: Framework, o: Mapping[str, Any]) -> Served:
        """The model as the framework is to build it: its config folder,
        name, and for one GLM-5 layer kind its first layer and the run of
        the same kind."""
        config = o["config"]
        if o.get("served"):  # a model other than GLM-5 (or any model vLLM serves): its folder, nothing of GLM-5's
            folder = config if os.path.isdir(config) else os.path.dirname(config)
            return Served(config_dir=folder, name=o["served"]["name"], spec=o["served"]["spec"],
                          provider=_provider(framework, o["served"]["spec"]), facts={"config": config})
        return _glm5().served(framework.name, o["kind"], config, _provider(framework, "glm5"))


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
    return None if _is_glm5(folder) else folder


def _glm5() -> Any:
    """GLM-5's own part of the provider (its layers, the re-created layer,
    its served record), imported only where GLM-5 is the model."""
    from graphbreak_doctor.targets.models.glm5 import served

    return served


@functools.cache
def _default_architecture() -> str:
    """The default packaged model's architecture (GLM-5's), read from its
    config folder as data: asking imports nothing of its package."""
    from graphbreak_doctor.targets.model_folder import read_model_folder
    from graphbreak_doctor.targets.models.packaged import packaged

    return read_model_folder(str(packaged()[0].config_dir)).architectures[0]


def _is_glm5(folder: Any) -> bool:
    return _default_architecture() in folder.architectures


def _provider(framework: Framework, spec: str) -> str:
    """What the findings name as the provider that built a served model:
    the framework and the model (``sglang/qwen3moe``)."""
    return f"{framework.name}/{spec.removesuffix('-' + framework.name)}"


def _slug(architecture: str) -> str:
    """An architecture's name as a spec's first word: GlmMoeDsaForCausalLM -> glmmoedsa."""
    return re.sub(r"forcausallm$", "", re.sub(r"[^a-z0-9]", "", architecture.lower())) or "model"


PROVIDER = Glm5Provider()

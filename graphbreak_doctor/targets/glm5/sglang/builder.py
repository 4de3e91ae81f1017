"""GLM-5-NVFP4's dense and MoE blocks as SGLang itself builds and runs them.

``build_layer`` imports SGLang inside the device (stand-ins for the
CUDA-only binaries first, the platform window around the import); the
layer's module is built by the target's ``prepare`` for the mode it is
traced in, because SGLang's configuration for a compile state decides what
its modules build (the fusions of a tc_piecewise deployment):

- SGLang's set-up calls (runtime.py), then ``DeepseekV2MLP`` (dense layers)
  or ``DeepseekV2MoE`` (MoE layers) with the keyword arguments SGLang's
  ``DeepseekV2DecoderLayer`` passes, behind the layer's post-attention
  ``RMSNorm`` (residual add fused), in the GLM-5 config's dtype on fake CUDA
  tensors; then each quantized module's ``process_weights_after_loading``,
  as SGLang's loader does after loading;
- piecewise mode: SGLang's tc_piecewise state (runtime.piecewise_state);
- SGLang's eager warm-up (one forward), unless ``--cold``.

With ``--whole-layer`` (scope "layer") the target is the whole
``DeepseekV2DecoderLayer`` and with ``--model`` (scope "model") the model's
forward (``DeepseekV2Model``, what SGLang's piecewise runner compiles), both
built by SGLang's dummy-weight loader and called with a ForwardBatch, its
KV pool and attention metadata (forward.py).

What SGLang cannot do on an emulated device without help is in
emulation/sglang.py, emulation/standins.py and emulation/dsl_dry.py; the
findings list what was used (``facts["emulation"]``, ``stand_ins``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from graphbreak_doctor.emulation import sglang as sglang_emulation
from graphbreak_doctor.emulation import dsl_dry, standins
from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation
from graphbreak_doctor.emulation.device import EmulatedDevice
from graphbreak_doctor.model import TargetInfo
from graphbreak_doctor.frames import short_path
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import PhaseNotRun, Target, TargetError
from graphbreak_doctor.targets.glm5.config import load_config
from graphbreak_doctor.targets.glm5.sglang import PHASES, decode_compile, forward, prefill_compile, runtime
from graphbreak_doctor.targets.glm5.sglang import launch as sglang_launch
from graphbreak_doctor.text import one_line

MODEL = "GLM-5 (GlmMoeDsaForCausalLM)"

# What runs inside the registered ops SGLang's GLM-5 blocks call, where
# Dynamo does not trace (an op is listed only when the installed SGLang
# registers it).
OPAQUE_OPS = {
    "sglang::flashinfer_fp4_quantize": "FlashInfer's fp4_quantize (activation to NVFP4): its whole Python path, "
                                       "JIT included (the nvcc version probe, the module cache stats, the module load)",
    "sglang::fp4_gemm": "FlashInfer's mm_fp4 (the NVFP4 GEMM of SGLang's fp4 GEMM backend), with its JIT module load",
    "sglang::_run_activation_inplace": "SGLang's SiLU-and-mul activation kernel",
    "sgl_kernel::fused_add_rmsnorm": "sgl-kernel's fused residual add + RMSNorm kernel",
    "sgl_kernel::silu_and_mul": "sgl-kernel's SiLU-and-mul kernel",
    "sgl_kernel::scaled_fp4_quant": "sgl-kernel's activation to NVFP4 quantization kernel",
    "sglang::moe_forward_piecewise_cuda_graph_impl": "the routed experts: SGLang's FusedMoE dispatch and FlashInfer's "
                                                     "fused MoE kernel call, with its JIT and autotuner",
    "sglang::fused_moe_bypassed_piecewise_cuda_graph_impl": "the routed experts with routing inside the kernel: "
                                                            "FlashInfer's trtllm fused MoE call, with its JIT and autotuner",
    "sglang::apply_fp4_marlin_linear": "the Marlin FP4 GEMM (SGLang's JIT kernel)",
    "sglang::fused_marlin_moe": "the Marlin FP4 fused MoE (SGLang's JIT kernels)",
    "flashinfer::fp4_quantize": "FlashInfer's fp4_quantize, its own registered op",
}

# The keyword arguments SGLang's DeepseekV2DecoderLayer builds its MLP block
# with (a release gets those its constructor accepts).
_MLP_KWARGS = {"parallel_group": "tp", "reduce_results": False, "allow_fused_down": False}
_MOE_KWARGS = {"alt_stream": None, "is_nextn": False, "reduce_results": False}


class MlpBlock(torch.nn.Module):
    """What SGLang's decoder layer runs after attention: the post-attention
    RMSNorm, which adds the residual, then the MLP block."""

    def __init__(self, post_attention_layernorm: torch.nn.Module, mlp: torch.nn.Module) -> None:
        super().__init__()
        self.post_attention_layernorm = post_attention_layernorm
        self.mlp = mlp

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual


def _scratch(device: str, log: UndoLog) -> Path:
    if device == "cpu":
        raise TargetError("SGLang's layers run on a CUDA device: use an emulated one (--device sm120, sm100, sm90) "
                          "or --device cuda on a GPU machine")
    if device == "cuda":
        folder = tempfile.TemporaryDirectory(prefix="graphbreak-doctor-sglang-")
        log.call_on_undo(folder.cleanup)
        return Path(folder.name)
    return sglang_emulation.scratch_folder()


def _import_sglang() -> None:
    for name in ("sglang.srt.models.deepseek_v2", "sglang.srt.models.glm4_moe"):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise TargetError(f"importing SGLang failed ({name}): {type(e).__name__}: {e}") from e


def build_layer(kind: str, *, config: str | None, tokens: int, device: str, cold: bool, log: UndoLog,
                scope: str = "block", phase: str = "extend", launch_args: tuple[str, ...] = ()) -> Target:
    """SGLang's block (scope "block"), whole decoder layer ("layer") for one
    GLM-5 layer kind, or the reduced model ("model", kind "model"); call
    inside the device. The module itself is built by the target's
    ``prepare`` (see the module doc)."""
    cfg = load_config(config)
    same = cfg.layer_indices("moe" if kind == "model" else kind)
    index = same[0]
    scratch = _scratch(device, log)
    installed = standins.install(log)
    sglang_emulation.isolate_caches(log, scratch)
    with sglang_emulation.platform_window():
        _import_sglang()
        standins.finish(installed)
    # Triton is imported with SGLang: on an emulated GPU its kernels too are
    # launched dry from now on (a real GPU launches them).
    device = EmulatedDevice.active()
    launched: list[str] = []
    if device is not None:
        dsl_dry.install(log, device.dry_launch)
        launched = device.dry_launches
    sglang_emulation.inductor_as_eager(log)
    release = runtime.version()
    if kind == "model":
        spec, title = f"glm5-sglang:model:{phase}", f"{MODEL} model forward (reduced), {phase}, SGLang {release}"
    else:
        spec = f"glm5-sglang:{kind}:{index}" + ("" if scope == "block" else f":layer:{phase}")
        whole = "" if scope == "block" else f"whole decoder layer, {phase}, "
        title = f"{MODEL} {kind} layer {index}, {whole}SGLang {release}"
    info = TargetInfo(
        spec=spec,
        provider="glm5",
        title=title,
        shapes={"hidden_size": cfg.hidden_size},
        notes=[f"layers {same[0]}-{same[-1]} run the same code"] if len(same) > 1 and kind != "model" else [],
        facts={"impl": "sglang", "sglang_version": release, "model": MODEL, "layer_kind": kind,
               "layer_index": index if kind != "model" else None, "config": cfg.path,
               "quant_profile": cfg.quant.path, "scope": scope, **({} if scope == "block" else {"phase": phase})},
        stand_ins=installed.lines,
    )
    pin = runtime.torch_pin()
    if pin and pin != torch.__version__.split("+")[0]:
        info.notes.append(f"SGLang {release} pins torch {pin}; traced on torch {torch.__version__.split('+')[0]}")
    target = Target(fn=_not_prepared, info=info)
    config_dir = str(Path(cfg.path).parent)
    if scope == "block":
        target.prepare = lambda mode, mode_log: _prepare(target, mode, mode_log, kind=kind, index=index,
                                                         config_dir=config_dir, tokens=tokens, cold=cold,
                                                         launched=launched, launch_args=launch_args)
    else:
        target.prepare = lambda mode, mode_log: _prepare_stack(target, mode, mode_log, scope=scope, phase=phase,
                                                               moe=kind != "dense", index=index,
                                                               config_dir=config_dir, tokens=tokens, cold=cold,
                                                               launched=launched, launch_args=launch_args)
    if scope == "model":
        target.discover = lambda mode_log, phase_scope: _discover(target, mode_log, phase_scope,
                                                                  config_dir=config_dir, tokens=tokens,
                                                                  launched=launched, launch_args=launch_args)
    return target


def _not_prepared(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("an SGLang target is traced after its prepare(mode) built the module")


def _prepare(target: Target, mode: str, log: UndoLog, *, kind: str, index: int, config_dir: str, tokens: int,
             cold: bool, launched: list[str], launch_args: tuple[str, ...]) -> None:
    piecewise = mode == "piecewise"
    with sglang_emulation.platform_window():
        try:
            rt, block = _set_up_and_build(kind, index, config_dir, log, piecewise=piecewise, launch_args=launch_args)
        except ValueError as e:  # SGLang's own refusal (a device or backend it does not support)
            raise TargetError(f"SGLang {runtime.version()} refuses to build the {kind} layer here: "
                              f"{one_line(str(e), 300)}") from e
        folded = sglang_emulation.fold_platform_probes(log)
    hidden = rt.model_config.hf_config.hidden_size
    args = tuple(torch.empty(tokens, hidden, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    log.enter(torch.no_grad())
    if piecewise:
        log.enter(runtime.piecewise_state(block.mlp, index, rt.quant_config, tokens))
    if not cold:
        try:
            block(*args)
        except Exception as e:
            raise TargetError(f"SGLang's eager warm-up failed: {type(e).__name__}: {one_line(str(e), 200)} "
                              "(--cold skips it)") from e
    target.fn, target.args = block.forward, args
    _describe(target.info, block, rt, mode=mode, tokens=tokens, cold=cold, folded=folded, launched=launched,
              mlp=block.mlp)


def _model(config_dir: str, log: UndoLog, *, layers_for: Callable[[Any], int], piecewise: bool,
           launch_args: tuple[str, ...], resolved: Callable[[runtime.Runtime], None] = lambda _rt: None,
           ) -> tuple[runtime.Runtime, torch.nn.Module, int, int, list[str]]:
    """SGLang's set-up for the launch, then the model with ``layers_for(hf_config)``
    decoder layers through SGLang's loader: (runtime, model, layers built,
    the model's layers, folded probes). ``resolved`` is called with the
    runtime as soon as SGLang has resolved the launch, before the model is built."""
    with sglang_emulation.platform_window():
        try:
            rt = _set_up(True, config_dir, log, piecewise=piecewise, launch_args=launch_args)
            resolved(rt)
            full = rt.model_config.hf_config.num_hidden_layers
            layers = layers_for(rt.model_config.hf_config)
            with sglang_emulation.consistent_fake_weights():
                model = forward.build_model(rt, layers)
        except ValueError as e:  # SGLang's own refusal (a device or backend it does not support)
            raise TargetError(f"SGLang {runtime.version()} refuses to build GLM-5 here: {one_line(str(e), 300)}") from e
        folded = sglang_emulation.fold_platform_probes(log)
    return rt, model, layers, full, folded


def _forward_state(rt: runtime.Runtime, layers: int, phase: str, tokens: int) -> forward.ForwardState:
    try:
        return forward.make_state(rt, layers, phase, tokens)
    except Exception as e:
        raise TargetError(f"SGLang's attention metadata for {'an' if phase[0] in 'aeiou' else 'a'} {phase} batch "
                          "could not be built here: "
                          f"{type(e).__name__}: {one_line(str(e), 200)}{_raised_at(e)}") from e


def _raised_at(error: BaseException) -> str:
    """" (raised at sglang/srt/...py:LINE in FUNCTION)": the innermost frame of
    ``error``'s traceback, so a failure inside SGLang says where it stopped."""
    stack = traceback.extract_tb(error.__traceback__)
    if not stack:
        return ""
    last = stack[-1]
    return f" (raised at {short_path(last.filename)}:{last.lineno} in {last.name})"


def _run_eagerly(call: Callable[..., Any], args: tuple, phase: str, what: str) -> None:
    """Run SGLang's forward as its server does before (or instead of) compiling."""
    try:
        call(*args)
    except Exception as e:
        why = flashinfer_emulation.unanswered_planner(e)
        if why:
            raise TargetError(f"cannot run SGLang's {phase} forward on an emulated "
                              f"{torch.cuda.get_device_name()}: {why}") from e
        raise TargetError(f"SGLang's {what} failed: {type(e).__name__}: {one_line(str(e), 200)}{_raised_at(e)}"
                          + (" (--cold skips it)" if what == "eager warm-up" else "")) from e


def _prepare_stack(target: Target, mode: str, log: UndoLog, *, scope: str, phase: str, moe: bool, index: int,
                   config_dir: str, tokens: int, cold: bool, launched: list[str],
                   launch_args: tuple[str, ...]) -> None:
    """Scopes "layer" and "model": the model through SGLang's loader, then the
    forward state (forward.py) and the call."""
    piecewise = mode == "piecewise"
    settings = forward.settings(log)
    rt, model, layers, full, folded = _model(
        config_dir, log, piecewise=piecewise, launch_args=launch_args,
        layers_for=forward.reduced_layer_count if scope == "model" else lambda _hf: index + 1)
    hf = rt.model_config.hf_config
    state = _forward_state(rt, layers, phase, tokens)
    log.enter(torch.no_grad())
    log.enter(state.context())
    batch = state.batch
    if scope == "model":
        call = model.model
        args: tuple = (batch.input_ids, batch.positions, batch)
    else:
        call = forward.DecoderLayerCall(model.model, index)
        hidden = torch.empty(batch.input_ids.shape[0], hf.hidden_size, dtype=torch.bfloat16, device="cuda")
        args = (batch.positions, hidden, batch)
    # The warm-up runs where the release's runner runs its eager forward:
    # inside its piecewise state (the runner backend's compile pass), or
    # before it (older runners, whose forwards in that state are compiled).
    warm_inside = not piecewise or prefill_compile.warms_in_state()
    if not cold and not warm_inside:
        _run_eagerly(call, args, phase, "eager warm-up")
    if piecewise:
        log.enter(runtime.piecewise_state(model.model, index, rt.quant_config, state.batch.input_ids.shape[0],
                                          layer_model=model.model, forward_batch=state.batch, rt=rt))
    if not cold and warm_inside:
        _run_eagerly(call, args, phase, "eager warm-up")
    target.fn, target.args = call.forward, args
    info = target.info
    _describe(info, call, rt, mode=mode, tokens=tokens, cold=cold, folded=folded, launched=launched,
              mlp=None if scope == "model" else call.layer.mlp)
    info.facts.update(layers_built=layers, model_layers=full, values_used=state.values + settings)
    if scope == "model":
        info.notes.insert(0, _model_note(info, hf, layers, full))
    else:
        info.notes.insert(0, f"implementation: SGLang {info.facts['sglang_version']}'s own DeepseekV2DecoderLayer "
                             f"{index}, entered as the first layer of its stack (a fresh residual stream)")
    info.notes.append(f"forward batch: {state.values[0]}")


def _model_note(info: TargetInfo, hf: Any, layers: int, full: int) -> str:
    kinds = forward.layer_kinds(hf, layers)
    return (f"implementation: SGLang {info.facts['sglang_version']}'s own DeepseekV2Model forward "
            f"(what its piecewise runner compiles), {layers} of {full} decoder layers: the fewest "
            f"that hold each kind ({sum(1 for k in kinds if not k[0])} dense, "
            f"{sum(1 for k in kinds if k[0])} MoE); SGLang builds the next-N (MTP) layer only "
            "for speculative decoding, in its draft model")


def _discover(target: Target, log: UndoLog, phase_scope: Callable[[str], Any], *, config_dir: str, tokens: int,
              launched: list[str], launch_args: tuple[str, ...]) -> None:
    """The model as the resolved launch runs it: one forward per phase
    (extend, then decode), each inside ``phase_scope(phase)``, so that the
    torch.compile regions each phase enters are known (capture/regions.py).
    The forwards run as SGLang runs them outside any compile of its own."""
    settings = forward.settings(log)
    # The map runs every phase, not the one the target's trace is of.
    target.info.title = f"{MODEL} model forward (reduced), {' and '.join(PHASES)}, SGLang {runtime.version()}"

    def publish(rt: runtime.Runtime) -> None:
        # How the launch runs each phase is known before the model is built:
        # a map whose build stops later still says it.
        target.info.facts["launch"] = rt.launch

    rt, model, layers, full, folded = _model(config_dir, log, piecewise=False, launch_args=launch_args,
                                             layers_for=forward.reduced_layer_count, resolved=publish)
    log.enter(torch.no_grad())
    values: list[str] = []
    # Per phase, what the map's phase line adds: SGLang's own compile of the
    # prefill forward, or why a later phase could not be run here.
    added: dict[str, str] = {}
    for phase in PHASES:
        try:
            state = _forward_state(rt, layers, phase, tokens)
        except TargetError as e:
            if phase == PHASES[0]:  # no phase runs: the map stops, with the launch SGLang resolved
                raise PhaseNotRun(f"the {phase} phase cannot run here: {e}") from e
            # A release whose metadata for this phase needs a kernel the
            # emulation has no answer for: the map goes on without the phase.
            added[phase] = f"not run here ({e}); its regions are not in the map"
            continue
        batch = state.batch
        try:
            with state.context(), phase_scope(phase, state.context):
                _run_eagerly(model.model, (batch.input_ids, batch.positions, batch), phase, f"{phase} forward")
        except TargetError as e:
            if phase == PHASES[0]:
                raise PhaseNotRun(f"the {phase} phase cannot run here: {e}") from e
            # The regions the forward entered before it stopped are in the map.
            added[phase] = f"stopped here ({e}); regions it enters after that point are not in the map"
            continue
        values.append(f"{phase}: {state.values[0]}")
        if phase == "extend" and sglang_launch.prefill_compiled(rt.launch.get("resolved", {})):
            added[phase] = _compile_prefill(rt, model, state, layers, log, phase_scope)
    compiled = _compile_decode(rt, model, layers, phase_scope) if decode_compile.enabled(rt) else None
    info = target.info
    _describe(info, model.model, rt, mode="map", tokens=tokens, cold=False, folded=folded, launched=launched)
    info.facts.update(layers_built=layers, model_layers=full, values_used=values + settings)
    if added:
        facts = info.facts["launch"] = dict(info.facts["launch"])
        phases = facts["phases"] = dict(facts.get("phases") or {})
        for phase, text in added.items():
            phases[phase] = f"{phases.get(phase, '')}; {text}".lstrip("; ")
    if compiled is not None:
        launch = info.facts["launch"] = dict(info.facts["launch"])
        launch["decode_compile"] = compiled.to_dict()
        phases = launch["phases"] = dict(launch.get("phases") or {})
        phases["decode"] = f"{phases.get('decode', '')}; {compiled.describe()}".lstrip("; ")
    info.notes.insert(0, _model_note(info, rt.model_config.hf_config, layers, full))


def _compile_prefill(rt: runtime.Runtime, model: torch.nn.Module, state: forward.ForwardState, layers: int,
                     log: UndoLog, phase_scope: Callable[[str], Any]) -> str:
    """A tc_piecewise launch: the extend forward through SGLang's own
    ``install_torch_compiled`` in its tc_piecewise state (prefill_compile.py),
    inside ``phase_scope("extend")``, so the compile map records SGLang's own
    torch.compile of the model forward. The runner compiles at each of its
    capture sizes, the largest first: the doctor drives the largest, a middle
    and the smallest of SGLang's own list, in that order (the extend batch's
    size where the config lists none). One line for the map's extend phase."""
    if not prefill_compile.available():
        return (f"SGLang {runtime.version()} has no install_torch_compiled / tc_piecewise runner backend: "
                "the prefill forward's compile could not be driven")
    try:
        config = prefill_compile.compile_config(rt)
    except TargetError as e:
        return str(e)
    prefill_compile.install(model.model, config, log)
    sizes = prefill_compile.capture_sizes(config)
    driven = list(reversed(decode_compile.pick(sizes))) or [state.batch.input_ids.shape[0]]
    line = (f"compiled by SGLang's install_torch_compiled (fullgraph=True, SGLang's piecewise backend, "
            f"compiler {getattr(config, 'compiler', '?')}); driven at {', '.join(map(str, driven))} tokens"
            + (f" (the largest, a middle and the smallest of its {len(sizes)} capture sizes)" if sizes else ""))
    stops: list[tuple[int, str]] = []  # (tokens, why the compile pass stopped there)
    for tokens in driven:
        try:
            sized = state if tokens == state.batch.input_ids.shape[0] else _forward_state(rt, layers, "extend", tokens)
        except TargetError as e:
            stops.append((tokens, str(e)))
            continue
        batch = sized.batch
        # What the compiled forward runs inside (entered again to trace it).
        context = functools.partial(_tc_piecewise_state, sized, model, rt, tokens)
        try:
            with phase_scope("extend", context), context():
                model.model(batch.input_ids, batch.positions, batch)
        except Exception as e:
            # The server's compile pass stops here; the map says where, and
            # the region is traced with SGLang's options.
            stops.append((tokens, f"{type(e).__name__}: {one_line(str(e), 200)}"))
    reasons = {why for _tokens, why in stops}
    if len(stops) == len(driven) > 1 and len(reasons) == 1:
        return f"{line}; the runner's compile pass stopped at each size: {reasons.pop()}"
    return "; ".join([line, *(f"the runner's compile pass stopped at {tokens} tokens: {why}" for tokens, why in stops)])


@contextlib.contextmanager
def _tc_piecewise_state(state: forward.ForwardState, model: torch.nn.Module, rt: runtime.Runtime,
                        tokens: int) -> Any:
    """The batch's forward context, SGLang's tc_piecewise state and its
    compile warm-up marker (what the runner's compile pass runs inside)."""
    with state.context(), runtime.piecewise_state(model.model, 0, rt.quant_config, tokens,
                                                  layer_model=model.model, forward_batch=state.batch, rt=rt), \
            prefill_compile.compile_pass():
        yield


def _compile_decode(rt: runtime.Runtime, model: torch.nn.Module, layers: int,
                    phase_scope: Callable[[str], Any]) -> decode_compile.DecodeCompile:
    """--enable-torch-compile: the decode forward as SGLang's decode runner
    compiles it, at the smallest, a middle and the largest of its compile
    batch sizes (decode_compile.py), inside ``phase_scope("decode")``."""
    done = decode_compile.DecodeCompile()
    try:
        done.compile_bs = decode_compile.compile_sizes(rt)
    except TargetError as e:  # a release whose runner reads more than the doctor gives it: the map goes on
        done.notes.append(f"the decode forward's compile sizes could not be read: {e}")
        return done
    done.traced_bs = decode_compile.pick(done.compile_bs)
    if not done.traced_bs:  # describe() says so
        return done
    with decode_compile.server_settings() as limit:
        done.recompile_limit = limit
        for size in done.traced_bs:
            state = _forward_state(rt, layers, "decode", size)
            batch = state.batch
            # What the forward runs inside: the batch's forward context and
            # SGLang's compile-time module state (entered again to trace it).
            context = functools.partial(_compiled_decode_state, state, model, size)
            try:
                with phase_scope("decode", context), _compiled_decode_state(state, model, size) as fwd:
                    fwd(batch.input_ids, batch.positions, batch)
            except Exception as e:
                # The server would stop here; the map says where, and keeps what it found.
                done.notes.append(f"the compiled decode forward at batch size {size} failed: "
                                  f"{type(e).__name__}: {one_line(str(e), 200)}")
                break
    return done


@contextlib.contextmanager
def _compiled_decode_state(state: forward.ForwardState, model: torch.nn.Module, size: int) -> Any:
    """The batch's forward context inside SGLang's ``patch_model`` for batch
    size ``size``; yields the compiled forward."""
    with state.context(), decode_compile.compiled_forward(model, size) as fwd:
        yield fwd


def _set_up(moe: bool, config_dir: str, log: UndoLog, *, piecewise: bool,
            launch_args: tuple[str, ...]) -> runtime.Runtime:
    rt = runtime.set_up(config_dir, log, launch_args=launch_args, piecewise=piecewise)
    if moe and runtime.moe_backend().is_auto() and torch.cuda.get_device_capability()[0] >= 10:
        # Older releases leave "auto" on Blackwell: SGLang's own cutlass MoE,
        # through sgl-kernel ops no stand-in declares.
        rt = runtime.set_up(config_dir, log, launch_args=launch_args, piecewise=piecewise,
                            moe_runner_backend="flashinfer_cutlass")
        rt.notes.append("SGLang left the MoE runner backend at auto here (its own cutlass MoE through sgl-kernel "
                        "ops, which are not emulated); traced with --moe-runner-backend flashinfer_cutlass")
    return rt


def _set_up_and_build(kind: str, index: int, config_dir: str, log: UndoLog, *, piecewise: bool,
                      launch_args: tuple[str, ...]) -> tuple[runtime.Runtime, MlpBlock]:
    rt = _set_up(kind == "moe", config_dir, log, piecewise=piecewise, launch_args=launch_args)
    block = _build_block(kind, index, rt)
    with sglang_emulation.consistent_fake_weights():
        _process_weights(block)
    return rt, block


def _build_block(kind: str, index: int, rt: runtime.Runtime) -> MlpBlock:
    models = importlib.import_module("sglang.srt.models.deepseek_v2")
    _, rms_norm = runtime.require("sglang.srt.layers.layernorm:RMSNorm")
    _, default_dtype = runtime.require("sglang.srt.model_loader.utils:set_default_torch_dtype")
    config = rt.model_config.hf_config
    prefix = f"model.layers.{index}.mlp"
    with contextlib.ExitStack() as stack:
        stack.enter_context(default_dtype(rt.model_config.dtype))
        stack.enter_context(torch.device("cuda"))
        for building in rt.building:
            stack.enter_context(building())
        if kind == "dense":
            mlp = runtime.call(models.DeepseekV2MLP, hidden_size=config.hidden_size,
                               intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
                               quant_config=rt.quant_config, prefix=prefix,
                               swiglu_limit=getattr(config, "swiglu_limit", None), **_MLP_KWARGS)
        else:
            mlp = runtime.call(models.DeepseekV2MoE, config=config, layer_id=index, quant_config=rt.quant_config,
                               prefix=prefix, **_MOE_KWARGS)
        norm = rms_norm(config.hidden_size, eps=config.rms_norm_eps)
    return MlpBlock(norm, mlp)


def _process_weights(block: torch.nn.Module) -> None:
    """What SGLang's loader runs on each quantized module after loading."""
    for module in block.modules():
        method = getattr(module, "quant_method", None)
        if method is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading(module)


def _backend_names() -> dict[str, str]:
    out = {"moe_runner_backend": str(runtime.moe_backend().value)}
    fp4 = runtime.optional("sglang.srt.layers.quantization.fp4_utils:get_fp4_gemm_runner_backend")
    if fp4 is not None:
        out["fp4_gemm_backend"] = str(fp4().value)
    return out


def _registered(qualname: str) -> bool:
    namespace, _, name = qualname.partition("::")
    return hasattr(getattr(torch.ops, namespace), name)


def _describe(info: TargetInfo, module: torch.nn.Module, rt: runtime.Runtime, *, mode: str, tokens: int, cold: bool,
              folded: list[str], launched: list[str], mlp: torch.nn.Module | None = None) -> None:
    """``module``: what is traced; ``mlp``: its MLP block, if it is one layer's."""
    config = rt.model_config.hf_config
    info.function = module.forward.__qualname__
    info.shapes.update(tokens=tokens, tp=1)
    kind = info.facts["layer_kind"]
    if kind in ("dense", "model"):
        info.shapes["intermediate_size"] = config.intermediate_size
    if kind in ("moe", "model"):
        info.shapes.update(moe_intermediate_size=config.moe_intermediate_size,
                           n_routed_experts=config.n_routed_experts, experts_per_tok=config.num_experts_per_tok)
        experts = getattr(mlp, "experts", None)
        total = getattr(experts, "num_experts", None)
        if total is not None:
            info.facts["experts_in_kernel"] = total
    state = "tc_piecewise (SGLang's piecewise CUDA-graph compile state)" if mode == "piecewise" else "plain"
    cls = type(mlp if isinstance(module, MlpBlock) else getattr(module, "layer", module))
    if isinstance(module, MlpBlock):
        info.notes.insert(0, f"implementation: SGLang {info.facts['sglang_version']}'s own {cls.__name__} "
                             f"({cls.__module__}) behind its RMSNorm, built through SGLang's set-up calls")
    info.notes.append(f"compile state: {state}; eager warm-up: "
                      + ("skipped (--cold)" if cold else "ran first, as SGLang warms up before it compiles"))
    info.notes.extend(rt.notes)
    info.facts.update(
        sglang_module=f"{cls.__module__}.{cls.__qualname__}",
        quant_config=type(rt.quant_config).__name__,
        compile_state=state,
        launch=rt.launch,
        warm_up=not cold,
        **_backend_names(),
        emulation=_emulation_changes(folded),
        kernels_run_dry=launched,
    )
    info.split_ops = runtime.split_ops()
    info.opaque_ops = {op: text for op, text in OPAQUE_OPS.items() if _registered(op)}


def _emulation_changes(folded: list[str]) -> list[str]:
    changes = sglang_emulation.CHANGES
    out = [changes["platform_window"], changes["isolate_caches"], changes["inductor_as_eager"],
           changes["consistent_fake_weights"]]
    if folded:
        out.insert(1, changes["fold_platform_probes"].format(names=", ".join(folded)))
    out.append("Triton and CuTe DSL kernels: has_triton() answered True (launches captured as on the GPU); "
               "launches on fake tensors ran dry")
    return out


__all__ = ["MlpBlock", "build_layer"]

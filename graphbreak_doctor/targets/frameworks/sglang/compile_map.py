"""The compile map of an SGLang model (``--model --mode map``): the model
run as the resolved launch runs it, one phase after the other, so that the
torch.compile regions each phase enters are known (capture/regions.py); and
where the launch compiles, SGLang's own compile driven: the tc_piecewise
prefill (prefill_compile.py) and the ``--enable-torch-compile`` decode
(decode_compile.py)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import torch

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import LaunchRefused, PhaseNotRun, Target, TargetError
from graphbreak_doctor.targets.provider import pick_sizes
from graphbreak_doctor.targets.frameworks.sglang import (PHASES, cudagraphs, decode_compile, depth, distributed,
                                                          forward, prefill_compile, runtime)
from graphbreak_doctor.targets.frameworks.sglang import launch as sglang_launch
from graphbreak_doctor.targets.frameworks.sglang.construction import load_model
from graphbreak_doctor.targets.frameworks.sglang.eager import forward_state, run_eagerly
from graphbreak_doctor.targets.frameworks.sglang.target_info import fill_target_info, memory_fit, model_note
from graphbreak_doctor.text import one_line


def discover_compile_regions(target: Target, log: UndoLog, phase_scope: Callable[[str], Any], *, config_dir: str,
                             tokens: int, launched: list[str], launch_args: tuple[str, ...]) -> None:
    """The model as the resolved launch runs it: one forward per phase
    (extend, then decode), each inside ``phase_scope(phase)``, so that the
    torch.compile regions each phase enters are known (capture/regions.py).
    The forwards run as SGLang runs them outside any compile of its own."""
    settings = forward.settings(log)
    # The map runs every phase, not the one the target's trace is of.
    target.info.title = f"{target.info.facts['model']} model forward (reduced), {' and '.join(PHASES)}, SGLang {runtime.version()}"

    def publish(rt: runtime.Runtime) -> None:
        # How the launch runs each phase is known before the model is built:
        # a map whose build stops later still says it.
        target.info.facts["launch"] = rt.launch

    rt, model, layers, full = load_model(config_dir, log, piecewise=False, launch_args=launch_args,
                                                 layers_for=depth.reduced_layer_count, resolved=publish)
    # Every SGLang module the phases run is loaded by now: its collective
    # operators are known to the world, so the traced graphs list them.
    distributed.declare_collectives(log)
    log.enter(torch.no_grad())
    values: list[str] = []
    # Per phase, what the map's phase line adds: SGLang's own compile of the
    # prefill forward, or why a later phase could not be run here.
    added: dict[str, str] = {}
    for phase in PHASES:
        try:
            state = forward_state(rt, layers, phase, tokens)
        except LaunchRefused:  # SGLang's own refusal on this device: the server would not start
            raise
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
                run_eagerly(model.model, (batch.input_ids, batch.positions, batch), phase, f"{phase} forward")
        except LaunchRefused:
            raise
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
    fill_target_info(info, model.model, rt, mode="map", tokens=tokens, cold=False, launched=launched)
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
    info.notes.insert(0, model_note(info, rt, model, layers, full))
    memory, note = memory_fit(rt, model, full)
    if memory is not None:
        info.facts["memory"] = memory
    info.notes.append(note)
    # The CUDA-graph map captures the model this build made (cudagraphs.py).
    target.cudagraphs = functools.partial(cudagraphs.capture_phases, rt, model, layers)


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
    driven = list(reversed(pick_sizes(sizes))) or [state.batch.input_ids.shape[0]]
    line = (f"compiled by SGLang's install_torch_compiled (fullgraph=True, SGLang's piecewise backend, "
            f"compiler {getattr(config, 'compiler', '?')}); driven at {', '.join(map(str, driven))} tokens"
            + (f" (the largest, a middle and the smallest of its {len(sizes)} capture sizes)" if sizes else ""))
    stops: list[tuple[int, str]] = []  # (tokens, why the compile pass stopped there)
    for tokens in driven:
        try:
            sized = state if tokens == state.batch.input_ids.shape[0] else forward_state(rt, layers, "extend", tokens)
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
    done.traced_bs = pick_sizes(done.compile_bs)
    if not done.traced_bs:  # describe() says so
        return done
    with decode_compile.server_settings() as limit:
        done.recompile_limit = limit
        for size in done.traced_bs:
            state = forward_state(rt, layers, "decode", size)
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

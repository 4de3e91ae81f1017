"""An SGLang target's ``prepare(mode)``: the module built for the mode it is
traced in, since SGLang's configuration for a compile state decides what
its modules build (the fusions of a tc_piecewise deployment); in piecewise
mode SGLang's tc_piecewise state (runtime.piecewise_state) entered; SGLang's
eager warm-up run unless ``--cold``; then what is traced recorded in the
target's info (target_info.py).

``prepare_block`` is scope "block" (one layer's MLP block behind its norm);
``prepare_stack`` is scopes "layer" (the whole decoder layer) and "model"
(the reduced model forward), both called with a ForwardBatch, its KV pool
and attention metadata (forward.py)."""

from __future__ import annotations

import torch

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.targets.frameworks.sglang import depth, forward, prefill_compile, runtime
from graphbreak_doctor.targets.frameworks.sglang.construction import load_block, load_model
from graphbreak_doctor.targets.frameworks.sglang.eager import forward_state, run_eagerly
from graphbreak_doctor.targets.frameworks.sglang.target_info import fill_target_info, model_note
from graphbreak_doctor.text import one_line


def prepare_block(target: Target, mode: str, log: UndoLog, *, kind: str, index: int, config_dir: str, tokens: int,
                  cold: bool, launched: list[str], launch_args: tuple[str, ...]) -> None:
    """Scope "block": layer ``index``'s MLP block behind its norm, called with
    ``tokens`` hidden states and the residual."""
    piecewise = mode == "piecewise"
    try:
        rt, block = load_block(kind, index, config_dir, log, piecewise=piecewise, launch_args=launch_args)
    except ValueError as e:  # SGLang's own refusal (a device or backend it does not support)
        raise TargetError(f"SGLang {runtime.version()} refuses to build the {kind} layer here: "
                          f"{one_line(str(e), 300)}") from e
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
    target.fn, target.args, target.own_warm_up = block.forward, args, True
    fill_target_info(target.info, block, rt, mode=mode, tokens=tokens, cold=cold, launched=launched,
                     mlp=block.mlp)


def prepare_stack(target: Target, mode: str, log: UndoLog, *, scope: str, phase: str, moe: bool, index: int,
                  config_dir: str, tokens: int, cold: bool, launched: list[str],
                  launch_args: tuple[str, ...]) -> None:
    """Scopes "layer" and "model": the model through SGLang's loader, then the
    forward state (forward.py) and the call."""
    piecewise = mode == "piecewise"
    settings = forward.settings(log)
    rt, model, layers, full = load_model(
        config_dir, log, piecewise=piecewise, launch_args=launch_args,
        layers_for=depth.reduced_layer_count if scope == "model" else lambda _rt: index + 1)
    hf = rt.model_config.hf_config
    state = forward_state(rt, layers, phase, tokens)
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
        run_eagerly(call, args, phase, "eager warm-up")
    if piecewise:
        log.enter(runtime.piecewise_state(model.model, index, rt.quant_config, state.batch.input_ids.shape[0],
                                          layer_model=model.model, forward_batch=state.batch, rt=rt))
    if not cold and warm_inside:
        run_eagerly(call, args, phase, "eager warm-up")
    target.fn, target.args, target.own_warm_up = call.forward, args, True
    info = target.info
    fill_target_info(info, call, rt, mode=mode, tokens=tokens, cold=cold, launched=launched,
                     mlp=None if scope == "model" else call.layer.mlp)
    info.facts.update(layers_built=layers, model_layers=full, values_used=state.values + settings)
    if scope == "model":
        info.notes.insert(0, model_note(info, rt, model, layers, full))
    else:
        info.notes.insert(0, f"implementation: SGLang {info.facts['sglang_version']}'s own DeepseekV2DecoderLayer "
                             f"{index}, entered as the first layer of its stack (a fresh residual stream)")
    info.notes.append(f"forward batch: {state.values[0]}")

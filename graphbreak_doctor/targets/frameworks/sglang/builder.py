"""GLM-5-NVFP4's dense and MoE blocks as SGLang itself builds and runs them.

``build_layer`` imports SGLang inside the device (stand-ins for the
CUDA-only binaries first) and makes
the target; its module is built by the target's ``prepare`` for the mode it
is traced in (prepare.py), because SGLang's configuration for a compile
state decides what its modules build (the fusions of a tc_piecewise
deployment):

- SGLang's set-up calls (runtime.py, set_up.py), then ``DeepseekV2MLP``
  (dense layers) or ``DeepseekV2MoE`` (MoE layers) with the keyword
  arguments SGLang's ``DeepseekV2DecoderLayer`` passes, behind the layer's
  post-attention ``RMSNorm`` (residual add fused), in the GLM-5 config's
  dtype on fake CUDA tensors; then each quantized module's
  ``process_weights_after_loading``, as SGLang's loader does after loading
  (construction.py);
- piecewise mode: SGLang's tc_piecewise state (runtime.piecewise_state);
- SGLang's eager warm-up (one forward), unless ``--cold``.

With ``--whole-layer`` (scope "layer") the target is the whole
``DeepseekV2DecoderLayer`` and with ``--model`` (scope "model") the model's
forward (``DeepseekV2Model``, what SGLang's piecewise runner compiles), both
built by SGLang's dummy-weight loader and called with a ForwardBatch, its
KV pool and attention metadata (forward.py); a model target also draws the
compile map (compile_map.py).

What SGLang cannot do on an emulated device without help is in
targets/frameworks/sglang/emulation.py, emulation/standins/ and emulation/dsl_dry.py; the
findings list what was used (``facts["emulation"]``, ``stand_ins``,
target_info.py).
"""

from __future__ import annotations

from typing import Any

import torch

from graphbreak_doctor.targets.frameworks.framework import Served
from graphbreak_doctor.targets.frameworks.sglang import emulation as sglang_emulation
from graphbreak_doctor.emulation import dsl_dry, standins
from graphbreak_doctor.emulation.device import EmulatedDevice
from graphbreak_doctor.model import TargetInfo
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target
from graphbreak_doctor.targets.frameworks import registry
from graphbreak_doctor.targets.frameworks.sglang import runtime
from graphbreak_doctor.targets.frameworks.sglang.compile_map import discover_compile_regions
from graphbreak_doctor.targets.frameworks.sglang.prepare import prepare_block, prepare_stack
from graphbreak_doctor.targets.frameworks.sglang.set_up import import_sglang, scratch_folder


def build_layer(kind: str, *, served: Served, tokens: int, device: str, cold: bool, log: UndoLog,
                scope: str = "block", phase: str = "extend", launch_args: tuple[str, ...] = ()) -> Target:
    """SGLang's block (scope "block"), whole decoder layer ("layer") for one
    layer kind, or the reduced model ("model", kind "model"); call inside the
    device. The module itself is built by the target's ``prepare`` (see the
    module doc)."""
    index = served.index if kind != "model" else None
    scratch = scratch_folder(device, log)
    installed = registry.install_stand_ins(log)
    sglang_emulation.isolate_caches(log, scratch)
    import_sglang()
    standins.register_missing_fakes(installed)
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
        spec = f"{served.spec}:model:{phase}"
        title = f"{served.name} model forward (reduced), {phase}, SGLang {release}"
    else:
        spec = f"{served.spec}:{kind}:{index}" + ("" if scope == "block" else f":layer:{phase}")
        whole = "" if scope == "block" else f"whole decoder layer, {phase}, "
        title = f"{served.name} {kind} layer {index}, {whole}SGLang {release}"
    same = served.same
    info = TargetInfo(
        spec=spec,
        provider=served.provider,
        title=title,
        shapes=dict(served.shapes),
        notes=[f"layers {same[0]}-{same[-1]} run the same code"] if len(same) > 1 and kind != "model" else [],
        facts={"impl": "sglang", "sglang_version": release, "model": served.name, "layer_kind": kind,
               "layer_index": index, **served.facts, "scope": scope, **({} if scope == "block" else {"phase": phase})},
        stand_ins=installed.lines,
    )
    pin = runtime.torch_pin()
    if pin and pin != torch.__version__.split("+")[0]:
        info.notes.append(f"SGLang {release} pins torch {pin}; traced on torch {torch.__version__.split('+')[0]}")
    target = Target(fn=_not_prepared, info=info)
    config_dir = served.config_dir
    if scope == "block":
        target.prepare = lambda mode, mode_log: prepare_block(target, mode, mode_log, kind=kind, index=index,
                                                              config_dir=config_dir, tokens=tokens, cold=cold,
                                                              launched=launched, launch_args=launch_args)
    else:
        target.prepare = lambda mode, mode_log: prepare_stack(target, mode, mode_log, scope=scope, phase=phase,
                                                              moe=kind != "dense", index=index,
                                                              config_dir=config_dir, tokens=tokens, cold=cold,
                                                              launched=launched, launch_args=launch_args)
    if scope == "model":
        target.discover = lambda mode_log, phase_scope: discover_compile_regions(
            target, mode_log, phase_scope, config_dir=config_dir, tokens=tokens, launched=launched,
            launch_args=launch_args)
    return target


def _not_prepared(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("an SGLang target is traced after its prepare(mode) built the module")


__all__ = ["build_layer"]

"""What a build does around SGLang's own set-up calls (runtime.py): a scratch
folder for the caches SGLang's import redirects, the import itself, and the
set-up for a launch with a MoE runner backend this machine can run."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from graphbreak_doctor.targets.frameworks.sglang import emulation as sglang_emulation
from graphbreak_doctor.emulation.presets import emulated_names
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.targets.frameworks.sglang import runtime


def scratch_folder(device: str, log: UndoLog) -> Path:
    """Where SGLang's caches go for this build: the emulation's scratch folder,
    or on a real GPU a temporary folder removed with ``log``."""
    if device == "cpu":
        raise TargetError(f"SGLang's layers run on a CUDA device: use an emulated one (--device {emulated_names()}) "
                          "or --device cuda on a GPU machine")
    if device == "cuda":
        folder = tempfile.TemporaryDirectory(prefix="graphbreak-doctor-sglang-")
        log.call_on_undo(folder.cleanup)
        return Path(folder.name)
    return sglang_emulation.scratch_folder()


def import_sglang() -> None:
    """Import the SGLang models GLM-5 is built from; a failed import is one line."""
    for name in ("sglang.srt.models.deepseek_v2", "sglang.srt.models.glm4_moe"):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise TargetError(f"importing SGLang failed ({name}): {type(e).__name__}: {e}") from e


def set_up_runtime(moe: bool, config_dir: str, log: UndoLog, *, piecewise: bool,
                   launch_args: tuple[str, ...]) -> runtime.Runtime:
    """SGLang's set-up for the launch; for a MoE layer on Blackwell, again with
    FlashInfer's cutlass MoE where the release leaves the backend at auto."""
    rt = runtime.set_up(config_dir, log, launch_args=launch_args, piecewise=piecewise)
    if moe and runtime.moe_backend().is_auto() and torch.cuda.get_device_capability()[0] >= 10:
        # Older releases leave "auto" on Blackwell: SGLang's own cutlass MoE,
        # through sgl-kernel ops no stand-in declares.
        rt = runtime.set_up(config_dir, log, launch_args=launch_args, piecewise=piecewise,
                            moe_runner_backend="flashinfer_cutlass")
        rt.notes.append("SGLang left the MoE runner backend at auto here (its own cutlass MoE through sgl-kernel "
                        "ops, which are not emulated); traced with --moe-runner-backend flashinfer_cutlass")
    return rt

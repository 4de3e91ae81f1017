"""FlashInfer's JIT cache and target architectures, as on the emulated GPU.

The JIT cache lives in the emulation's scratch folder for its duration
(`flashinfer.jit.env.FLASHINFER_*_DIR`), named after the emulated
architecture as FlashInfer names it (`jit/env.py: _get_workspace_dir_name`).
What FlashInfer computed at import from the real environment (those folders,
`flashinfer.jit.core.current_compilation_context.TARGET_CUDA_ARCHS`) is
recomputed by FlashInfer's own code under the emulated environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.patching import UndoLog


def install(preset: DevicePreset, log: UndoLog, root: Path) -> tuple[Path, set]:
    """FlashInfer's JIT folders in `root` and its target architectures those
    of `preset`, until `log` is undone; returns the JIT workspace and the
    target architectures."""
    jit_core = sys.modules["flashinfer.jit.core"]
    jit_env = sys.modules["flashinfer.jit.env"]
    from flashinfer.compilation_context import CompilationContext

    log.setenv("FLASHINFER_CUDA_ARCH_LIST", preset.arch_list)
    log.setenv("FLASHINFER_WORKSPACE_BASE", str(root / "home"))

    # jit/env.py computed these at import from the real environment.
    base = root / "home"
    log.setattr(jit_env, "FLASHINFER_BASE_DIR", base)
    log.setattr(jit_env, "FLASHINFER_CACHE_DIR", base / ".cache" / "flashinfer")
    workspace = jit_env._get_workspace_dir_name()  # FlashInfer's own naming, emulated arch
    log.setattr(jit_env, "FLASHINFER_WORKSPACE_DIR", workspace)
    log.setattr(jit_env, "FLASHINFER_JIT_DIR", workspace / "cached_ops")
    log.setattr(jit_env, "FLASHINFER_GEN_SRC_DIR", workspace / "generated")
    workspace.mkdir(parents=True, exist_ok=True)  # jit/core.py does this at import

    # jit/core.py: current_compilation_context is imported by name elsewhere,
    # so its set is updated in place (as refresh_current_compilation_context
    # does in 0.7.4) and restored in place.
    targets = jit_core.current_compilation_context.TARGET_CUDA_ARCHS
    saved = set(targets)

    def restore_targets() -> None:
        targets.clear()
        targets.update(saved)

    log.call_on_undo(restore_targets)
    emulated = CompilationContext().TARGET_CUDA_ARCHS
    targets.clear()
    targets.update(emulated)
    return workspace, emulated

"""The emulated CUDA toolkit: a throwaway CUDA_HOME for FlashInfer's probes.

Its `bin/nvcc` is a shell script that answers `--version` /
`--list-gpu-arch` for the preset's CUDA release and refuses to compile, its
`bin/nvidia-smi` answers a serving framework's start-up queries, and its
`bin/ninja` (first on PATH) succeeds without building anything. The
subprocesses still run, from FlashInfer's code.
"""

from __future__ import annotations

import stat
from pathlib import Path

from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.emulation.presets import toolkit_archs

_NVCC = """#!/bin/sh
# graphbreak-doctor emulated CUDA toolkit: answers FlashInfer's probes,
# compiles nothing.
case "$1" in
  --version)
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Copyright (c) 2005-2025 NVIDIA Corporation"
    echo "Cuda compilation tools, release {cuda}, V{cuda}.0"
    echo "Build cuda_{cuda}.r{cuda}/compiler.emulated_0"
    ;;
  --list-gpu-arch)
    for a in {archs}; do echo "compute_$a"; done
    ;;
  *)
    echo "graphbreak-doctor: emulated nvcc does not compile ($*)" >&2
    exit 1
    ;;
esac
"""

_NINJA = """#!/bin/sh
# graphbreak-doctor emulated build: FlashInfer's run_ninja gets a successful,
# empty build; nothing is compiled and no library is written.
exit 0
"""

# The driver's query tool, for the queries serving frameworks make at start-up
# (total memory, compute capability, name, the GPU list); anything else fails
# as on a machine where it cannot answer.
_NVIDIA_SMI = """#!/bin/sh
# graphbreak-doctor emulated nvidia-smi ({device_name})
case "$*" in
  *--query-gpu=memory.total*) echo "{memory_mib}" ;;
  *--query-gpu=compute_cap*) echo "{capability}" ;;
  *--query-gpu=name*) echo "{device_name}" ;;
  *--list-gpus*|-L) echo "GPU 0: {device_name} (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *) echo "graphbreak-doctor: emulated nvidia-smi does not answer: $*" >&2; exit 1 ;;
esac
"""


def _write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_toolkit(root: Path, preset: DevicePreset) -> Path:
    """The emulated toolkit for `preset` in `root`; returns its CUDA_HOME."""
    cuda_home = root / "cuda"
    (cuda_home / "bin").mkdir(parents=True)
    (cuda_home / "include").mkdir()
    _write_exe(
        cuda_home / "bin" / "nvcc",
        _NVCC.replace("{cuda}", preset.toolkit_cuda).replace(
            "{archs}", " ".join(str(a) for a in toolkit_archs(preset))
        ),
    )
    _write_exe(cuda_home / "bin" / "ninja", _NINJA)
    _write_exe(cuda_home / "bin" / "nvidia-smi", _NVIDIA_SMI.format(
        device_name=preset.device_name, memory_mib=preset.memory_gb * 1024,
        capability=f"{preset.major}.{preset.minor}"))
    return cuda_home

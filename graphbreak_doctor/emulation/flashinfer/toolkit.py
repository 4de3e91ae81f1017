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

# The driver's query tool, for the queries serving frameworks make at start-up:
# `--query-gpu=<fields>` (one line per GPU of the node, csv, with a header
# and units unless `--format` says noheader / nounits), the GPU list and the
# topology matrix (`topo -m`); anything else fails as on a machine where it
# cannot answer. The values are written in by `make_toolkit`.
_NVIDIA_SMI = """#!/bin/sh
# graphbreak-doctor emulated nvidia-smi: {gpus} x {device_name}
gpus={gpus}
uuid() {{ printf 'GPU-00000000-0000-0000-0000-%012d' "$1"; }}
{link_function}
case "$1" in
  -L|--list-gpus)
    i=0; while [ $i -lt $gpus ]; do echo "GPU $i: {device_name} (UUID: $(uuid $i))"; i=$((i+1)); done; exit 0 ;;
  topo)
    [ "$2" = "-m" ] || {{ echo "graphbreak-doctor: emulated nvidia-smi does not answer: $*" >&2; exit 1; }}
    printf '\t'; i=0; while [ $i -lt $gpus ]; do printf 'GPU%d\t' $i; i=$((i+1)); done; echo
    i=0
    while [ $i -lt $gpus ]; do
      printf 'GPU%d\t' $i; j=0
      while [ $j -lt $gpus ]; do
        if [ $i -eq $j ]; then printf ' X \t'; else printf '%s\t' "$(link $i $j)"; fi
        j=$((j+1))
      done
      echo; i=$((i+1))
    done
    exit 0 ;;
esac
query=""; format="csv"
for arg in "$@"; do
  case "$arg" in
    --query-gpu=*) query="${{arg#--query-gpu=}}" ;;
    --format=*) format="${{arg#--format=}}" ;;
    -i|--id=*|-i=*) ;;
  esac
done
[ -n "$query" ] || {{ echo "graphbreak-doctor: emulated nvidia-smi does not answer: $*" >&2; exit 1; }}
units=1; case "$format" in *nounits*) units=0 ;; esac
field() {{
  case "$1" in
    name) echo "{device_name}" ;;
    memory.total) if [ $units = 1 ]; then echo "{memory_mib} MiB"; else echo "{memory_mib}"; fi ;;
    compute_cap) echo "{capability}" ;;
    index) echo "$2" ;;
    count) echo "$gpus" ;;
    uuid) uuid "$2" ;;
    *) return 1 ;;
  esac
}}
fields=$(echo "$query" | tr ',' ' ')
for f in $fields; do field "$f" 0 >/dev/null || {{ printf 'Field "%s" is not a valid field to query.\n' "$f" >&2; exit 2; }}; done
case "$format" in
  *noheader*) ;;
  *) line=""; for f in $fields; do
       h="$f"; [ "$f" = memory.total ] && [ $units = 1 ] && h="$f [MiB]"
       line="${{line:+$line, }}$h"; done; echo "$line" ;;
esac
i=0
while [ $i -lt $gpus ]; do
  line=""; for f in $fields; do line="${{line:+$line, }}$(field "$f" $i)"; done
  echo "$line"; i=$((i+1))
done
"""


def _write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _link_function(preset: DevicePreset) -> str:
    """``link I J``: how GPUs I and J reach each other, as ``topo -m`` names
    it. An HGX board links every pair alike (NV18); a PCIe server with two
    CPU sockets is taken to hold half of its GPUs under each: NODE within a
    socket, SYS across (a server's own PCIe switches may say PIX instead)."""
    if preset.nvlink:
        return f"link() {{ echo {preset.link}; }}"
    return 'link() { if [ $(($1 * 2 / gpus)) -eq $(($2 * 2 / gpus)) ]; then echo NODE; else echo SYS; fi; }'


def make_toolkit(root: Path, preset: DevicePreset, gpus: int = 0) -> Path:
    """The emulated toolkit for `preset` (a node of `gpus` of them, default
    the preset's server) in `root`; returns its folder (a CUDA_HOME)."""
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
        gpus=gpus or preset.node_gpus, device_name=preset.device_name,
        memory_mib=preset.smi_memory_mib or preset.memory_gb * 1024,
        capability=f"{preset.major}.{preset.minor}",
        link_function=_link_function(preset)))
    return cuda_home

"""A FlashInfer library's JIT spec and sources: what the dry loader and the
host build read to know a library's exports and its build flags."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from graphbreak_doctor.emulation import host_build


def spec(name: str) -> Any:
    """FlashInfer's JitSpec `name` from its spec registry, or None."""
    core = sys.modules.get("flashinfer.jit.core")
    registry = getattr(core, "jit_spec_registry", None)
    return registry.get_all_specs().get(name) if registry is not None else None


def spec_sources(name: str) -> list[Path]:
    return list(getattr(spec(name), "sources", None) or [])


def sources_beside(path: str) -> list[Path]:
    """The sources in a library's own build folder: another JIT than
    FlashInfer's (SGLang's) builds there, generated export wrapper included."""
    folder = Path(path).parent
    return sorted(p for suffix in ("*.cu", "*.cuh", "*.cpp", "*.cc") for p in folder.glob(suffix))


def read_sources(sources: list[Path]) -> str:
    texts = []
    for source in sources:
        try:
            texts.append(Path(source).read_text(errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


def export_names(sources: list[Path]) -> tuple[str, ...]:
    """The names `TVM_FFI_DLL_EXPORT_TYPED_FUNC(name, ...)` exports in `sources`."""
    return host_build.export_names(read_sources(sources))

"""A FlashInfer library's JIT spec and sources: what the dry loader and the
host build read to know a library's exports and its build flags."""

from __future__ import annotations

import re
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


_SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc")
# A compile statement of a build.ninja: `build <object>: <rule> <source>`.
_NINJA_COMPILE = re.compile(r"^build [^:]+: \w+ (.+)$", re.MULTILINE)


def sources_beside(path: str) -> list[Path]:
    """The sources of a library built by another JIT than FlashInfer's
    (SGLang's): those in its build folder (a generated export wrapper), and
    those the folder's ``build.ninja`` compiles from where they are."""
    folder = Path(path).parent
    found = {p for suffix in _SOURCE_SUFFIXES for p in folder.glob(f"*{suffix}")}
    try:
        ninja = (folder / "build.ninja").read_text(errors="replace")
    except OSError:
        ninja = ""
    for match in _NINJA_COMPILE.finditer(ninja):
        # ninja escapes a space, a colon and a dollar with a dollar
        source = folder / re.sub(r"\$([ :$])", r"\1", match[1].strip().strip('"'))
        if source.suffix in _SOURCE_SUFFIXES and source.is_file():
            found.add(source)
    return sorted(found)


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

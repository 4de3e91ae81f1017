"""Importing FlashInfer: on this machine first, as far as it allows.

FlashInfer is imported before anything is patched, so what it computes at
import reflects the real machine and is restored exactly. A release that asks
the device in a module body imports only while an emulated device answers.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Optional


def flashinfer_installed() -> bool:
    return importlib.util.find_spec("flashinfer") is not None


def device_read_at_import(error: BaseException) -> str:
    """Where FlashInfer's import asked torch.cuda about the device and failed
    ('flashinfer/...py:LINE'), or '' if ``error`` is not that. Some releases
    query the device in a module body (0.6.18: the GDN kernels' SM count):
    on a machine without a GPU they import only while an emulated device
    answers."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    for i in range(len(frames) - 1, -1, -1):
        parts = Path(frames[i].filename).parts
        if "flashinfer" in parts:
            rest = frames[i + 1:]
            if rest and all(Path(f.filename).parts[-2:-1] == ("cuda",) and "torch" in Path(f.filename).parts
                            for f in rest):
                return f"{'/'.join(parts[parts.index('flashinfer'):])}:{frames[i].lineno}"
            return ""
    return ""


def import_on_this_machine() -> str:
    """Import FlashInfer as far as this machine allows: '' when it imported,
    else where its import asked the device ('flashinfer/...py:LINE'; the
    package imports under an emulated device, install)."""
    try:
        import_flashinfer()
    except (AssertionError, RuntimeError) as e:
        where = device_read_at_import(e)
        if not where:
            raise
        return where
    return ""


def import_flashinfer() -> Optional[Any]:
    if not flashinfer_installed():
        return None
    flashinfer = importlib.import_module("flashinfer")
    importlib.import_module("flashinfer.jit.core")
    importlib.import_module("flashinfer.jit.env")
    importlib.import_module("flashinfer.jit.cpp_ext")
    _bind_submodules()
    return flashinfer


def _bind_submodules() -> None:
    """After an import that failed part-way (device_read_at_import), the
    submodules it loaded stay in sys.modules, and importing the package again
    does not bind them on their parents as a first import does: bind those
    missing (``flashinfer.utils`` and the like)."""
    for name, module in list(sys.modules.items()):
        parent_name, _, child = name.rpartition(".")
        if module is None or parent_name.split(".")[0] != "flashinfer":
            continue
        parent = sys.modules.get(parent_name)
        if parent is not None and not hasattr(parent, child):
            setattr(parent, child, module)

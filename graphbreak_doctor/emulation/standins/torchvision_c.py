"""torchvision's ``_C`` (its wheel for torch 2.13 is CUDA-built): torchvision
swallows the load error, but its ``_meta_registrations`` module registers
fakes for ``torchvision::nms`` / ``qnms`` at import, which needs the ops to
exist. The stand-in declares the two schemas, no kernel."""

from __future__ import annotations

import glob
import sys

from graphbreak_doctor.emulation.standins.binaries import StandIns, declared, loads, op_library, package_dir
from graphbreak_doctor.emulation.standins.schemas import TORCHVISION_SCHEMAS
from graphbreak_doctor.patching import UndoLog


def install_torchvision(log: UndoLog, out: StandIns) -> None:
    home = package_dir("torchvision")
    if home is None or "torchvision" in sys.modules:
        return
    binaries = sorted(glob.glob(str(home / "_C*.so")))
    why = loads(binaries[0]) if binaries else "no _C library"
    if not why or all(declared(f"torchvision::{n}") for n in TORCHVISION_SCHEMAS):
        return
    lib = op_library(log, "torchvision")
    for name, schema in TORCHVISION_SCHEMAS.items():
        if not declared(f"torchvision::{name}"):
            lib.define(schema)
    out.lines.append(f"torchvision::{{{','.join(TORCHVISION_SCHEMAS)}}}: schemas only, no kernel "
                     f"(torchvision's _C does not load here: {why})")

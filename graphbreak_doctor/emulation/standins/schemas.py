"""The op schemas the stand-ins declare: the reader of the schema strings an
op library binary declares (sgl-kernel's and DeepGEMM's libraries are
declared from their own bytes), and torchvision's two, kept here since its
library stores its schema strings in pieces the reader cannot join."""

from __future__ import annotations

import mmap
import re
from pathlib import Path

# torchvision/csrc/ops/nms.cpp and ops/quantized/cpu/qnms_kernel.cpp.
TORCHVISION_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}

# A schema string as a binary holds it: ``name(args) -> returns`` or
# ``name.overload(args) -> returns`` ending at a NUL, the name lower case and
# not the tail of a longer identifier.
_SCHEMA = re.compile(rb"(?<![A-Za-z0-9_.])([a-z_0-9]+(?:\.[a-z_0-9]+)?)\(([^\x00]*?)\) -> ([^\x00]*?)\x00")
_ARROW = b") -> "

# What schemas_in read, per binary: (path, size, mtime_ns) -> schemas.
_READ: dict[tuple[str, int, int], tuple[str, ...]] = {}


def schemas_in(binary: str | Path) -> tuple[str, ...]:
    """Every schema string ``binary`` declares, in the order its bytes hold
    them, read once per file version in this process.

    The file is mapped, not read: the search for ``") -> "`` runs at C speed
    over the mapping (about 0.3 s for 400 MB), and only the NUL-terminated
    string around each hit goes through the pattern, which finds the
    leftmost schema in it, as a scan of the whole file with the pattern
    would (but seconds faster). A string that is not UTF-8 is no schema and
    is left out."""
    path = Path(binary).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _READ:
        _READ[key] = _read_schemas(path) if stat.st_size else ()
    return _READ[key]


def _read_schemas(path: Path) -> tuple[str, ...]:
    found: list[str] = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        hit = data.find(_ARROW)
        while hit >= 0:
            # The string holding the hit: from the NUL before it to the NUL
            # after; one string holds at most one schema (it ends at the NUL).
            start = data.rfind(b"\x00", 0, hit) + 1
            end = data.find(b"\x00", hit)
            if end < 0:
                break  # the file's last bytes, not a terminated string
            match = _SCHEMA.search(data, start, end + 1)
            if match:
                try:
                    found.append(match.group(0)[:-1].decode())
                except UnicodeDecodeError:
                    pass
            hit = data.find(_ARROW, end + 1)
    return tuple(found)


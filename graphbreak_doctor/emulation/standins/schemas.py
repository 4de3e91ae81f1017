"""The op schemas the stand-ins declare: the reader of the schema strings an
op library binary declares (sgl-kernel's and DeepGEMM's libraries are
declared from their own bytes), and torchvision's two, kept here since its
library stores its schema strings in pieces the reader cannot join."""

from __future__ import annotations

import mmap
import re
import struct
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

    The file is mapped, not read, and only where a host program keeps its
    strings: in an ELF file, the sections of data the loader maps
    (``data_ranges``); elsewhere, the whole file. The search for ``") -> "``
    runs at C speed over those ranges, and only the NUL-terminated string
    around each hit goes through the pattern, which finds the leftmost schema
    in it, as a scan of the ranges with the pattern would (but seconds
    faster). A string that is not UTF-8 is no schema and is left out."""
    path = Path(binary).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _READ:
        _READ[key] = _read_schemas(path) if stat.st_size else ()
    return _READ[key]


def _read_schemas(path: Path) -> tuple[str, ...]:
    found: list[str] = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for first, last in data_ranges(data):
            found.extend(_schemas_between(data, first, last))
    return tuple(found)


def _schemas_between(data: mmap.mmap, first: int, last: int) -> list[str]:
    found = []
    hit = data.find(_ARROW, first, last)
    while hit >= 0:
        # The string holding the hit: from the NUL before it to the NUL
        # after; one string holds at most one schema (it ends at the NUL).
        start = max(data.rfind(b"\x00", first, hit) + 1, first)
        end = data.find(b"\x00", hit, last)
        if end < 0:
            break  # the range's last bytes, not a terminated string
        match = _SCHEMA.search(data, start, end + 1)
        if match:
            try:
                found.append(match.group(0)[:-1].decode())
            except UnicodeDecodeError:
                pass
        hit = data.find(_ARROW, end + 1, last)
    return found


# ELF: section type "no bytes in the file" (.bss), and the flags "mapped by
# the loader" and "machine code".
_SHT_NOBITS, _SHF_ALLOC, _SHF_EXECINSTR = 8, 0x2, 0x4


def data_ranges(data: mmap.mmap | bytes) -> list[tuple[int, int]]:
    """The byte ranges of ``data`` a schema string can lie in: for an ELF
    file, its sections of data the loader maps (``.rodata``, where a
    library's string literals go, ``.data`` and the like), in file order --
    not its machine code, and not the GPU code a CUDA library embeds
    (``.nv_fatbin``, often nearly all of a gigabyte-sized library); for
    anything else, or an ELF file whose section table cannot be read, the
    whole of it."""
    whole = [(0, len(data))]
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return whole
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        if wide:
            (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
            entsize, count, names = struct.unpack_from(order + "HHH", data, 0x3A)
            layout = order + "IIQQQQIIQQ"
        else:
            (shoff,) = struct.unpack_from(order + "I", data, 0x20)
            entsize, count, names = struct.unpack_from(order + "HHH", data, 0x2E)
            layout = order + "IIIIIIIIII"
        if not count or names >= count or entsize < struct.calcsize(layout) or shoff + count * entsize > len(data):
            return whole  # none, or more than the header counts (extended numbering)
        sections = [struct.unpack_from(layout, data, shoff + i * entsize) for i in range(count)]
        strtab = sections[names]
        table = data[strtab[4]:strtab[4] + strtab[5]]
        ranges = []
        for name_at, kind, flags, _addr, offset, size, *_rest in sections:
            name = table[name_at:table.find(b"\x00", name_at)]
            if (kind == _SHT_NOBITS or not flags & _SHF_ALLOC or flags & _SHF_EXECINSTR or b"fatbin" in name
                    or not size or offset + size > len(data)):
                continue
            ranges.append((offset, offset + size))
    except struct.error:
        return whole
    return sorted(ranges)

"""The op-schema reader (graphbreak_doctor/emulation/standins/schemas.py) on
the op libraries installed in this environment: the data sections of each
ELF file it reads against the same search over the whole file.

Every SGLang and vLLM job reads these libraries once (their ops are declared
from the schema strings they hold), so the reader's time is paid per job.
sglang-kernel's `flash_ops` is 1.12 GB, 1.03 GB of it GPU code (`.nv_fatbin`):
searched whole, about a second with the file in the page cache and several
when it is not; its data sections, about 2.6 MB, in about 10 ms.

Target: the same schemas as the whole-file search on every library, and on
the largest library at least 20 times faster.

    .venv-sglang/bin/python benchmarks/op_schemas.py
    .venv-vllm/bin/python benchmarks/op_schemas.py
"""

from __future__ import annotations

import importlib.util
import mmap
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from graphbreak_doctor.emulation.standins import schemas  # noqa: E402

# The packages whose op libraries the stand-ins declare from their bytes.
PACKAGES = ("sgl_kernel", "deep_gemm", "vllm")
SPEEDUP = 20


def whole_file(path: Path) -> tuple[str, ...]:
    """The same search, over the whole file."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return tuple(schemas._schemas_between(data, 0, len(data)))


def libraries() -> list[Path]:
    found = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        for home in spec.submodule_search_locations:
            found.extend(p for p in Path(home).rglob("*.so") if p.stat().st_size)
    return sorted(found, key=lambda p: p.stat().st_size)


def timed(fn, path: Path) -> tuple[float, tuple[str, ...]]:
    started = time.perf_counter()
    out = fn(path)
    return time.perf_counter() - started, out


def main() -> int:
    found = libraries()
    if not found:
        print(f"no op library of {', '.join(PACKAGES)} installed here")
        return 1
    print("| library | size | schemas | whole file | data sections | speed-up | same |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    for path in found:
        whole_s, whole = timed(whole_file, path)
        ours_s, ours = timed(schemas._read_schemas, path)
        same = whole == ours
        ok &= same
        print(f"| {path.parent.name}/{path.name} | {path.stat().st_size / 1e6:.1f} MB | {len(ours)} | "
              f"{whole_s * 1000:.1f} ms | {ours_s * 1000:.1f} ms | {whole_s / max(ours_s, 1e-6):.0f}x | "
              f"{'yes' if same else 'NO'} |")
    largest = found[-1]
    whole_s = min(timed(whole_file, largest)[0] for _ in range(2))
    ours_s = min(timed(schemas._read_schemas, largest)[0] for _ in range(2))
    print(f"\nlargest: {largest.name}, {whole_s / ours_s:.0f}x faster (target: {SPEEDUP}x); "
          f"same schemas everywhere: {'yes' if ok else 'NO'}")
    return 0 if ok and whole_s / ours_s >= SPEEDUP else 1


if __name__ == "__main__":
    sys.exit(main())

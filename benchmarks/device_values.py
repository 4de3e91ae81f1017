"""What the emulated device answers when the host reads device values,
against a real GPU: the same probes on both, one table.

    python benchmarks/device_values.py            # on a machine with an NVIDIA GPU: both columns
    python benchmarks/device_values.py --emulated # here: the emulated column only (sm90)
    python benchmarks/device_values.py --json F   # the answers, for a later --compare F
    python benchmarks/device_values.py --compare F  # emulated answers beside F's real ones

Each probe is what a weight loader or an attention backend does on the host
with device tensors (emulation/host_memory.py, emulation/device_bounds.py):
a sign test of a scalar scale after a random fill, a NaN test of a large
FP8 scale after a uniform fill, ``unique`` of values computed on the
device, ``repeat_interleave`` by computed repeats, a view read after its
memory was written, the current stream after ``set_stream``, and Dynamo on
a ``functools.cache``d class method (vLLM's ``is_arch_support_pdl``). A
probe's answer is its value, or the name of the exception it raised. Where
the real GPU draws other random values, the probe answers what does not
depend on the draw (in the fill's range or not).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable

import torch

PROBES: dict[str, Callable[[], Any]] = {}


def probe(fn: Callable[[], Any]) -> Callable[[], Any]:
    PROBES[fn.__name__] = fn
    return fn


@probe
def scale_sign_after_random_fill() -> Any:
    scale = torch.tensor(-1.0, device="cuda")
    generator = torch.Generator(device="cuda")
    generator.manual_seed(1234)
    scale.uniform_(-1e-3, 1e-3, generator=generator)
    positive = bool(scale > 0.0)
    return {"read": True, "in_range": -1e-3 <= scale.item() <= 1e-3, "sign_is_bool": isinstance(positive, bool)}


@probe
def fp8_scale_nan_after_uniform_fill() -> Any:
    scale = torch.empty(4096, 384, dtype=torch.float8_e4m3fn, device="cuda")
    staged = torch.empty_like(scale, dtype=torch.float16)
    staged.uniform_(-1.0, 1.0)
    scale.copy_(staged)
    return bool(torch.isnan(scale.float()).any())


@probe
def unique_of_computed_values() -> Any:
    scales = torch.tensor([0.5, 0.5, 0.25], device="cuda") * 2
    return torch.unique(scales).numel()


@probe
def repeat_by_computed_repeats() -> Any:
    lens = torch.tensor([3, 5], dtype=torch.int32, device="cuda")
    return list(torch.repeat_interleave(torch.arange(2, device="cuda"), lens + 1).shape)


@probe
def view_read_after_its_memory_was_written() -> Any:
    lens = torch.tensor([3, 5], dtype=torch.int32, device="cuda")
    flat = lens.view(1, 2)
    lens.add_(1)
    return flat[0, 1].item()


@probe
def current_stream_after_set_stream() -> Any:
    side = torch.cuda.Stream()
    before = torch.cuda.current_stream()
    torch.cuda.set_stream(side)
    try:
        return torch.cuda.current_stream() == side
    finally:
        torch.cuda.set_stream(before)


class _Platform:
    @classmethod
    @functools.cache
    def is_arch_support_pdl(cls) -> bool:
        return torch.cuda.get_device_capability()[0] >= 9


@probe
def dynamo_on_a_cached_classmethod() -> Any:
    def kernel_wrapper(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if _Platform.is_arch_support_pdl() else x

    torch._dynamo.reset()
    try:
        torch.compile(kernel_wrapper, fullgraph=True, backend="eager")(torch.ones(4, device="cuda"))
    except Exception as e:  # the verdict is the exception: its kind and first line are the answer
        return f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
    return "compiled"


def answers() -> dict[str, Any]:
    out = {}
    for name, fn in PROBES.items():
        try:
            out[name] = fn()
        except Exception as e:  # a probe's exception is its answer
            out[name] = f"raises {type(e).__name__}"
    return out


@contextlib.contextmanager
def emulated(preset: str):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from graphbreak_doctor.emulation.device import EmulatedDevice

    with EmulatedDevice(preset):
        yield


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emulated", action="store_true", help="the emulated column only")
    parser.add_argument("--preset", default="sm90")
    parser.add_argument("--json", metavar="F", help="write the real GPU's answers to F")
    parser.add_argument("--compare", metavar="F", help="real answers written by --json on a GPU machine")
    args = parser.parse_args()
    columns: dict[str, dict[str, Any]] = {}
    if args.compare:
        columns["real GPU"] = json.loads(Path(args.compare).read_text())
    elif not args.emulated:
        if not torch.cuda.is_available():
            print("device_values.py: no CUDA GPU here; use --emulated or --compare F", file=sys.stderr)
            return 2
        columns[f"real {torch.cuda.get_device_name(0)}"] = answers()
        if args.json:
            Path(args.json).write_text(json.dumps(next(iter(columns.values())), indent=1))
    if args.emulated or args.compare:
        with emulated(args.preset):
            columns[f"emulated {args.preset}"] = answers()
    names = list(columns)
    print("| probe | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for probe_name in PROBES:
        print(f"| {probe_name} | " + " | ".join(json.dumps(columns[n].get(probe_name)) for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

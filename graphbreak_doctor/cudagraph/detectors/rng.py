"""cudagraph-rng: an operator torch tags ``nondeterministic_seeded`` (it
draws random numbers) on a device tensor, from a CUDA generator that is not
the device's default one and was not registered with the open graph
(``register_generator_state``): replay draws the same numbers again."""

from __future__ import annotations

import torch

from graphbreak_doctor.cudagraph.detectors.detector import OPERATOR, HazardDetector, Operation
from graphbreak_doctor.emulation import cuda_graph


def _device_kwarg(kwargs: dict) -> bool:
    """A factory asked for device memory (``device="cuda"``)."""
    device = kwargs.get("device")
    return device is not None and torch.device(device).type != "cpu"


def detect(op: Operation) -> str:
    if op.kind != OPERATOR or torch.Tag.nondeterministic_seeded not in op.func.tags:
        return ""
    if not (op.on_device or _device_kwarg(op.kwargs)):
        return ""
    names = [a.name for a in op.func._schema.arguments]
    generator = op.kwargs.get("generator", op.args[names.index("generator")]
                              if "generator" in names and names.index("generator") < len(op.args) else None)
    graph = cuda_graph.open_graph()
    known = (*torch.cuda.default_generators, *(graph.generators if graph is not None else ()))
    if generator is None or any(generator is g for g in known):
        return ""
    return (f"{op.func.overloadpacket.__name__} draws from a CUDA generator that is neither the default one nor "
            "registered with the graph (register_generator_state)")


DETECTOR = HazardDetector("unregistered-generator", "cudagraph-rng", detect,
                          help="random numbers from a CUDA generator the graph does not know")

"""Advice for the CUDA-graph capture hazards (the ``cudagraph-*``
categories): the change is in where the captured code reads host values or
waits for the device, which only a person can move. Advice only: the fix
ladder has nothing to apply."""

from __future__ import annotations

from graphbreak_doctor.recipes.recipe import Advice, Recipe

RECIPES = (
    Recipe(
        "sync-outside-capture",
        Advice(
            "Move {call} in {function} out of the captured segment",
            "A captured segment cannot wait for the device: reading a device value on the host (.item(), "
            ".tolist(), a Python branch on a CUDA tensor), a device-to-host copy, an operator whose output size "
            "depends on values (nonzero) or a synchronize is refused while a stream captures. Keep the value on "
            "the device (torch.where, a fixed-size kernel), compute it before capture from the runner's inputs, "
            "or run the code in an eager call between segments (a breakable graph's break point).",
            "# before (inside the captured forward)\n"
            "n = int(lengths.max().item())\n\n"
            "# after: the bound is the captured size, known before capture\n"
            "n = max_tokens",
            unnamed_call="the host read",
        ),
    ),
    Recipe(
        "read-at-replay",
        Advice(
            "Read {call} in {function} at replay, not at capture",
            "A value read on the host while a segment captures is frozen into the graph: every replay reuses it, "
            "whatever the batch. Read request state inside an eager call between segments (it runs again at "
            "every replay), or keep it in the runner's static device buffer that is refilled before each replay.",
            "# before (inside the captured forward)\n"
            "if batch.seq_lens_cpu.max() > 2048: ...\n\n"
            "# after: the decision runs at every replay\n"
            "@eager_on_graph\n"
            "def choose(batch): ...",
            unnamed_call="the host value",
        ),
    ),
    Recipe(
        "register-generator",
        Advice(
            "Register the generator of {call} with the graph (in {function}), or draw from the default one",
            "A CUDA graph replays random numbers by advancing the Philox offset of the generators it knows: the "
            "device's default generator, and those registered with graph.register_generator_state(generator) "
            "before capture. Register yours (or use the default) so each replay draws new numbers.",
            "# before capture\n"
            "graph.register_generator_state(generator)",
            unnamed_call="the random draw",
        ),
    ),
    Recipe(
        "capture-in-communicator-context",
        Advice(
            "Capture the collective {function} runs inside the framework's graph-capture context, which "
            "registers its buffers with the peers",
            "A custom all-reduce reads its peers' buffers through addresses it exchanges with them only when the "
            "framework's graph-capture context closes (the communicator's capture(): it registers every buffer "
            "the graphs captured). Captured outside it, the addresses are never registered and each replay reads "
            "peer pointers nobody filled in. Capture inside the context the framework's own runner uses, or "
            "register the graph buffers yourself after the capture and before the first replay.",
            "# the runner's capture loop\n"
            "with graph_capture(stream=stream) as context:  # the process groups' capture context\n"
            "    for size in sizes:\n"
            "        capture_one(size)\n"
            "# on leaving it, each communicator registers the buffers its graphs read",
            unnamed_call="the collective",
        ),
    ),
)

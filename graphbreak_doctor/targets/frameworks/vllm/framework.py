"""vLLM as the doctor sees it (framework.py): ``vllm serve``'s launch
arguments, the sizes its resolved launch compiles and captures at, and its
model forward built through its own loader (builder.py)."""

from __future__ import annotations

import re
from typing import Any, Mapping

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target
from graphbreak_doctor.targets.frameworks import launch_text
from graphbreak_doctor.targets.frameworks.framework import Build, Framework, Served
from graphbreak_doctor.targets.frameworks.vllm import PHASES
from graphbreak_doctor.targets.frameworks.vllm.launch import refuse_config_file
from graphbreak_doctor.targets.provider import Option, pick_sizes


class Vllm(Framework):
    name = "vllm"
    title = "vLLM"
    distribution = "vllm"
    phases = PHASES
    scopes = ("model",)
    docs = "docs/vllm.md"

    def launch_option(self) -> Option:
        return Option(self.option, "the server's launch arguments for vLLM (what follows `vllm serve`), read and "
                                   "resolved by the installed vLLM itself: the model forward as vLLM builds and "
                                   "compiles it; the model defaults to the GLM-5-NVFP4 config (or give it as vLLM "
                                   "does, or --model-path)",
                      metavar="ARGS", command_line=True, selects=True)

    def split_launch(self, text: str, config: str | None) -> tuple[tuple[str, ...], str | None]:
        """The model vLLM is given (``vllm serve MODEL`` or ``--model
        MODEL``), if any, is the model's config. A file of further arguments
        inside them is refused (launch.refuse_config_file)."""
        args = launch_text.split(text, self.option, "give vLLM's launch arguments (what follows `vllm serve`)")
        refuse_config_file(args)
        model = None
        if not args[0].startswith("-"):  # vllm serve MODEL ...
            model, args = args[0], args[1:]
        given, rest = launch_text.take_value(args, "--model", self.option)
        model = given if given is not None else model
        if model is not None:
            if config is not None:
                raise ValueError(f"{self.option} names a model and --config names another: give one")
            config = model
        return tuple(rest), config

    def server_sizes(self, launch: Mapping[str, Any], phase: str) -> tuple[list[int], str]:
        """A vLLM launch compiles its forward once, dynamically, over its
        compile ranges, and captures CUDA graphs at its capture sizes: both
        ends of each range, and the smallest, a middle and the largest
        capture size."""
        resolved = launch.get("resolved") or {}
        if resolved.get("mode") in (None, "NONE"):
            return [], ""
        ends = sorted({int(n) for r in resolved.get("compile_ranges") or [] for n in re.findall(r"\d+", str(r))})
        captured = pick_sizes([int(n) for n in resolved.get("cudagraph_capture_sizes") or []])
        if not ends and not captured:
            return [], ""
        return (sorted(set(ends) | set(captured)),
                "vLLM's compile range ends and the smallest, a middle and the largest of its CUDA-graph capture "
                "sizes (the resolved launch)")

    def sizes_to_prove(self, sizes: list[int]) -> list[int]:
        """The server's sizes are already the ones to prove at (server_sizes)."""
        return sorted(set(sizes))

    def build(self, served: Served, what: Build, *, device: str, log: UndoLog) -> Target:
        from graphbreak_doctor.targets.frameworks.vllm.builder import build_model

        return build_model(served, device=device, log=log, launch_args=what.launch, tokens=what.tokens)

    def install_stand_ins(self, log, out):
        """vLLM's native libraries (vllm_libs.py)."""
        from graphbreak_doctor.targets.frameworks.vllm.vllm_libs import install_vllm

        install_vllm(log, out)

    def environment(self, release, flashinfer, torch, read):
        from graphbreak_doctor.targets.frameworks.vllm import environment

        return environment.recipe(release, flashinfer, torch, read)

    def follow_release(self, release, files, env):
        from graphbreak_doctor.targets.frameworks.vllm import environment

        return environment.follow(release, files, env)


FRAMEWORK = Vllm()

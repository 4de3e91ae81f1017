"""SGLang as the doctor sees it (framework.py): the launch arguments of
``python -m sglang.launch_server``, the sizes its resolved launch compiles
the traced phase at, and a model, decoder layer or layer block built through
its own loader (builder.py)."""

from __future__ import annotations

from typing import Any, Mapping

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target
from graphbreak_doctor.targets.frameworks import launch_text
from graphbreak_doctor.targets.frameworks.framework import Build, Framework, Served
from graphbreak_doctor.targets.frameworks.sglang import PHASES
from graphbreak_doctor.targets.provider import Option


class Sglang(Framework):
    name = "sglang"
    title = "SGLang"
    distribution = "sglang"
    phases = PHASES
    scopes = ("model", "layer", "block")
    docs = "docs/sglang-glm5.md"
    always_recorded = True
    names_its_launch = False
    torch_release = True

    def launch_option(self) -> Option:
        return Option(self.option, "--impl sglang: the server's launch arguments (what follows "
                                   "`python -m sglang.launch_server`), read by the installed SGLang itself; "
                                   "--model-path defaults to the GLM-5-NVFP4 config (--config)", metavar="ARGS",
                      command_line=True)

    def split_launch(self, text: str, config: str | None) -> tuple[tuple[str, ...], str | None]:
        """The user's ``--model-path``, if given, is the model's config."""
        args = launch_text.split(text, self.option, "give SGLang's launch arguments, or leave it out")
        model_path, rest = launch_text.take_value(args, "--model-path", self.option)
        if model_path is not None:
            if config is not None:
                raise ValueError(f"{self.option} names --model-path and --config names another: give one")
            config = model_path
        return tuple(rest), config

    def server_sizes(self, launch: Mapping[str, Any], phase: str) -> tuple[list[int], str]:
        """The prefill's capture sizes (its piecewise or tc_piecewise
        runner's token list) where the launch compiles the prefill forward,
        the CUDA-graph batch sizes up to torch.compile's limit where it
        compiles the decode forward (--enable-torch-compile)."""
        resolved = launch.get("resolved") or {}
        phases = launch.get("phases") or {}
        graphs = resolved.get("cuda_graph_config") or {}
        if phase == "extend" and "torch.compile" in str(phases.get("extend", "")):
            prefill = graphs.get("prefill") or {}
            sizes = prefill.get("bs") or resolved.get("piecewise_cuda_graph_tokens") or []
            if sizes:
                field = "cuda_graph_config.prefill.bs" if prefill.get("bs") else "piecewise_cuda_graph_tokens"
                said = f"SGLang's prefill capture sizes (the resolved launch arguments' {field})"
                return [int(n) for n in sizes], said
        if resolved.get("enable_torch_compile"):
            limit = int(resolved.get("torch_compile_max_bs") or 0)
            decode = (graphs.get("decode") or {}).get("bs") or resolved.get("cuda_graph_bs") or []
            sizes = [int(n) for n in decode if not limit or int(n) <= limit]
            if sizes:
                return sizes, ("SGLang's CUDA-graph batch sizes up to torch_compile_max_bs "
                               "(--enable-torch-compile, the resolved launch arguments)")
        return [], ""

    def build(self, served: Served, what: Build, *, device: str, log: UndoLog) -> Target:
        from graphbreak_doctor.targets.frameworks.sglang import builder

        return builder.build_layer(what.kind, served=served, tokens=what.tokens, device=device, cold=what.cold,
                                   log=log, scope=what.scope, phase=what.phase or PHASES[0], launch_args=what.launch)

    def compiles_prefill_apart(self, launch: Mapping[str, Any]) -> bool:
        """tc_piecewise: the launch compiles the prefill forward with fullgraph."""
        from graphbreak_doctor.targets.frameworks.sglang.launch import prefill_compiled

        resolved = launch.get("resolved")
        return isinstance(resolved, dict) and bool(prefill_compiled(resolved))

    def said_lines(self, launch: Mapping[str, Any]) -> list[str]:
        """What SGLang logged about compiling while it resolved the launch,
        then the rules of its own code that changed a compile field."""
        said, rules = launch.get("sglang_said"), launch.get("sglang_rules")
        return ([f"SGLang said: {text}" for text in (said if isinstance(said, list) else ())]
                + [f"SGLang's rule: {text}" for text in (rules if isinstance(rules, list) else ())])

    def install_stand_ins(self, log, out):
        """sgl-kernel's libraries, DeepGEMM's and FlashMLA's (sgl_kernel_libs.py,
        deep_gemm_libs.py, flash_mla_libs.py)."""
        from graphbreak_doctor.targets.frameworks.sglang.deep_gemm_libs import install_deep_gemm
        from graphbreak_doctor.targets.frameworks.sglang.flash_mla_libs import install_flash_mla
        from graphbreak_doctor.targets.frameworks.sglang.sgl_kernel_libs import install_sgl_kernel

        install_sgl_kernel(log, out)
        install_deep_gemm(log, out)
        install_flash_mla(log, out)

    def environment(self, release, flashinfer, torch, read):
        from graphbreak_doctor.targets.frameworks.sglang import environment

        return environment.recipe(release, flashinfer, torch, read)

    def follow_release(self, release, files, env):
        from graphbreak_doctor.targets.frameworks.sglang import environment

        return environment.follow(release, files, env)


FRAMEWORK = Sglang()

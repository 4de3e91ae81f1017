"""A vLLM launch: ``--vllm-args "ARGS"`` is what follows ``vllm serve``.

The installed vLLM reads them with its own server parser
(``make_arg_parser``), turns them into engine arguments
(``AsyncEngineArgs.from_cli_args``) and resolves the engine's configuration
(``create_engine_config``, which runs ``VllmConfig.__post_init__``: the
optimization level's defaults, ``--enforce-eager``, the breakable-CUDA-graph
list, splitting ops, capture sizes, compile ranges). The doctor adds only
``--model`` (the config folder) and ``--load-format dummy`` (no checkpoint
is read). An argument the release refuses is one line with vLLM's own
message (TargetError: exit 2). A file of further arguments (``--config
FILE``, which vLLM's parser reads as YAML) is refused before anything runs
(``refuse_config_file``): what the launch is must be in the arguments given.

``describe`` is the record the findings keep (``facts["launch"]``), in
vLLM's own names and words: its resolved compilation settings, and the
messages vLLM logged while resolving that say why something is or is not
compiled or captured.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from typing import Any, Iterator

from graphbreak_doctor.targets import LaunchRefused, TargetError
from graphbreak_doctor.text import one_line

# vLLM's log messages kept as its reasons: the ones about compiling,
# capturing and eager execution.
_REASON = re.compile(r"compil|cuda ?graph|eager|dynamo|inductor|breakable", re.IGNORECASE)
# ... and the ones about its communicators (which it chose, which it declined).
COMMUNICATION = re.compile(r"all-?reduce|collectives|nccl|communicator|symmetric memory|p2p", re.IGNORECASE)


class _Said(logging.Handler):
    def __init__(self, about: re.Pattern = _REASON) -> None:
        super().__init__(logging.INFO)
        self.about = about
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = one_line(record.getMessage(), 400)
        except Exception as e:  # a record whose arguments do not format: keep what it was
            text = f"{record.msg!r} ({type(e).__name__})"
        if self.about.search(text) and text not in self.lines:
            self.lines.append(text)


@contextlib.contextmanager
def listening(about: re.Pattern = _REASON) -> Iterator[_Said]:
    """What vLLM's loggers say meanwhile (INFO and above), ``about`` compiling
    and capturing by default; nothing else is kept."""
    said = _Said(about)
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.addHandler(said)
    # vLLM's INFO messages reach the handler whatever its logging set-up
    # (its own handler keeps its own level).
    logger.setLevel(min(level or logging.INFO, logging.INFO))
    try:
        yield said
    finally:
        logger.removeHandler(said)
        logger.setLevel(level)


# The release's refusal of the launch reads "--vllm-args: vLLM 0.33.0 refuses
# them: <vLLM's message>" (its parser) or "... refuses the launch: <its
# message>" (its configuration), a LaunchRefused carrying vLLM's message.


# What vLLM's parser takes as --config, its file of further arguments: the
# word anywhere in the line (its parser looks for it before argparse does),
# --config=FILE, its dotted form (--config.KEY VALUE) and the abbreviations
# argparse allows (--conf, --confi; --con is also --convert's).
_CONFIG_FILE = re.compile(r"--conf(ig?)?([=.].*)?", re.DOTALL)


def refuse_config_file(args: list[str] | tuple[str, ...]) -> None:
    """A ValueError (exit 2, one line) when the launch arguments name a file
    of further arguments: the doctor reads the launch from the arguments
    themselves, never from a file vLLM would open."""
    if any(_CONFIG_FILE.fullmatch(arg) for arg in args):
        raise ValueError("--vllm-args: --config (a file of server arguments) is not read; "
                         "give the arguments themselves")


def _parse(args: tuple[str, ...], model_dir: str) -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:  # a release without the server's parser module here: the engine's arguments
        from vllm.engine.arg_utils import AsyncEngineArgs

        def make_arg_parser(parser: Any) -> Any:
            return AsyncEngineArgs.add_cli_args(parser)

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(["--model", model_dir, "--load-format", "dummy", *args])
    except SystemExit as e:
        lines = [ln.strip() for ln in stderr.getvalue().splitlines() if ln.strip()]
        said = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else f"exit {e.code}")
        said = one_line(said, 300)
        raise LaunchRefused(f"--vllm-args: vLLM {version()} refuses them: {said}", said=said) from None


def resolve(args: tuple[str, ...], model_dir: str) -> tuple[Any, list[str]]:
    """vLLM's resolved configuration for the launch, and what vLLM said
    about compiling and capturing while it resolved it."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    namespace = _parse(args, model_dir)
    with listening() as said:
        try:
            engine_args = AsyncEngineArgs.from_cli_args(namespace)
            try:
                from vllm.usage.usage_lib import UsageContext

                config = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
            except ImportError:
                config = engine_args.create_engine_config()
        except TargetError:
            raise
        except Exception as e:
            said = one_line(_first_reason(e), 300)
            raise LaunchRefused(f"--vllm-args: vLLM {version()} refuses the launch: {said}", said=said) from e
    return config, said.lines


def _first_reason(e: BaseException) -> str:
    """A pydantic validation error's own message (its first error), else the exception's."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            return str(first.get("msg") or e)
        except Exception:  # noqa: BLE001 -- not pydantic's shape: the plain message below
            pass
    return f"{type(e).__name__}: {e}"


def _name(value: Any) -> Any:
    return getattr(value, "name", value) if value is not None else None


def describe(config: Any, said: list[str], args: tuple[str, ...]) -> dict[str, Any]:
    """The launch as the findings record it (plain data)."""
    cc = config.compilation_config
    ranges = []
    with contextlib.suppress(Exception):  # a release without compile ranges records none
        ranges = [str(r) for r in cc.get_compile_ranges()]
    dynamic = getattr(getattr(cc, "dynamic_shapes_config", None), "type", None)
    resolved = {
        "mode": _name(cc.mode),
        "backend": cc.backend or None,
        "cudagraph_mode": _name(cc.cudagraph_mode),
        "splitting_ops": list(cc.splitting_ops or []),
        "dynamic_shapes": _name(dynamic),
        "cudagraph_capture_sizes": [int(n) for n in (cc.cudagraph_capture_sizes or [])],
        "max_cudagraph_capture_size": getattr(cc, "max_cudagraph_capture_size", None),
        "compile_ranges": ranges,
        "max_num_batched_tokens": int(config.scheduler_config.max_num_batched_tokens),
        "max_num_seqs": int(config.scheduler_config.max_num_seqs),
        "enforce_eager": bool(config.model_config.enforce_eager),
        "architecture": (config.model_config.architectures or ["?"])[0],
        "dtype": str(config.model_config.dtype).replace("torch.", ""),
        "quantization": config.model_config.quantization,
        "optimization_level": _name(getattr(config, "optimization_level", None)),
        # vLLM's own switch, which its resolution sets for the architectures
        # on its breakable-CUDA-graph list (unset: its default for the platform).
        "use_breakable_cudagraph": _breakable(cc),
    }
    resolved["not_compiled_because"] = _not_compiled_because(resolved) if not compiled(resolved) else []
    return {"framework": "vllm", "release": version(), "args": list(args), "resolved": resolved, "said": said,
            "compiled": compiled(resolved)}


def _breakable(cc: Any) -> str | None:
    """vLLM's breakable-CUDA-graph switch as its resolution left it: "1" or
    "0", None where unset. A release that keeps it in the compilation config
    has it there; an older one sets its environment variable."""
    kept = getattr(cc, "use_breakable_cudagraph", None)
    if kept is not None:
        return "1" if kept else "0"
    return os.environ.get("VLLM_USE_BREAKABLE_CUDAGRAPH")


def _not_compiled_because(resolved: dict[str, Any]) -> list[str]:
    """Which of the launch's resolved settings go with compilation mode
    NONE, by vLLM's names (its rules set the mode from them)."""
    out = []
    if resolved["enforce_eager"]:
        out.append("enforce_eager=True (--enforce-eager)")
    if str(resolved["optimization_level"]) in ("O0", "0"):
        out.append("optimization level O0")
    if resolved["use_breakable_cudagraph"] == "1":
        out.append(f"VLLM_USE_BREAKABLE_CUDAGRAPH=1 (breakable CUDA graphs for {resolved['architecture']})")
    return out


def compiled(resolved: dict[str, Any]) -> bool:
    """Whether the launch compiles the model with Dynamo at all."""
    return resolved.get("mode") not in (None, "NONE")


def version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "?"


__all__ = ["compiled", "describe", "refuse_config_file", "resolve", "version"]

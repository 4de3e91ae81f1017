"""A server's launch arguments, as the installed SGLang itself reads them.

``--sglang-args "ARGS"`` is what follows ``python -m sglang.launch_server``.
The doctor puts its own in front (the model's config folder as
``--model-path``, ``--tp-size 1``, and ``--quantization modelopt_fp4`` for a
ModelOpt FP4 checkpoint (:func:`doctor_args`); the
user's later ones win, as on any argparse command line) and hands the whole
line to SGLang's own parser (``ServerArgs.add_cli_args``, its argparse types
and choices) and ``ServerArgs.from_cli_args``; the release's own checks run
when the arguments are published (runtime.py). An argument the release
rejects is a LaunchRefused with SGLang's own message.

What a launch compiles is read back from what SGLang resolved
(:func:`resolved`): every server-argument field whose name is about CUDA
graphs, piecewise capture, torch.compile or the kernel backends -- whatever
the release calls them -- plus what SGLang logged about them while it
resolved (the rules that turn a compile path off speak there, in SGLang's
words).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import inspect
import json
import linecache
import logging
import os
import re
import sys
import textwrap
import tokenize
from typing import Any, Iterator

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import LaunchRefused, TargetError
from graphbreak_doctor.text import one_line

# What the doctor launches with before the user's arguments: one rank.
DOCTOR_ARGS = ("--tp-size", "1")
# ModelOpt's quantization algorithm SGLang serves as modelopt_fp4.
_MODELOPT_FP4 = ("NVFP4",)


def doctor_args(config_dir: str) -> tuple[str, ...]:
    """The doctor's own launch arguments for the model in ``config_dir``:
    ``--tp-size 1``, and ``--quantization modelopt_fp4`` only for a ModelOpt
    FP4 checkpoint (its hf_quant_config.json), which releases before
    SGLang's own detection of that file need to be told; any other
    checkpoint's quantization is what SGLang reads from its config.json."""
    path = os.path.join(config_dir, "hf_quant_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            algo = (json.load(f).get("quantization") or {}).get("quant_algo")
    except (OSError, ValueError, AttributeError, RecursionError):
        return DOCTOR_ARGS  # none, or unreadable: SGLang says what it makes of the folder
    return (("--quantization", "modelopt_fp4") if isinstance(algo, str) and algo.upper() in _MODELOPT_FP4
            else ()) + DOCTOR_ARGS

# Resolved server-argument fields that say what a launch compiles and captures.
_COMPILE_FIELDS = re.compile(r"cuda_graph|piecewise|torch_compile|compile_bs|capture_bs|attention_backend|"
                             r"moe_runner_backend|gemm_backend|moe_a2a_backend|kv_cache_dtype|^page_size$")
# What SGLang logs while it resolves that is about compiling or capturing.
_COMPILE_WORDS = re.compile(r"piecewise|torch[ ._-]?compile|cuda[ _-]?graph", re.IGNORECASE)
# What SGLang logs while it builds its process groups that is about the
# communicators it sets up or declines.
COMMUNICATION_WORDS = re.compile(r"all[ _-]?reduce|nccl|communicator|symmetric|symm|p2p|nvlink|ipc|fabric|clique",
                                 re.IGNORECASE)
# Terminal colours SGLang puts around some of its warnings.
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def rejected(release: str, message: str) -> LaunchRefused:
    """The error of a release that refuses the launch arguments: "SGLang
    0.5.23 rejects the launch arguments: <SGLang's own message>", carrying
    that message (a matrix cell shows it)."""
    return LaunchRefused(f"SGLang {release} rejects the launch arguments: {message}", said=message)


class _Refused(Exception):
    pass


def _parser(server_args_cls: Any) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)
    server_args_cls.add_cli_args(parser)
    return parser


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def piecewise_args(parser: argparse.ArgumentParser) -> list[str]:
    """The arguments that ask this release for its tc_piecewise prefill
    runner: the per-phase backend where the release has that option (a
    release that removed tc_piecewise rejects it there, in its own words),
    else the opt-in switch, else nothing (piecewise capture is on by default)."""
    flags = _flags(parser)
    if "--cuda-graph-backend-prefill" in flags:
        return ["--cuda-graph-backend-prefill", "tc_piecewise"]
    if "--enable-piecewise-cuda-graph" in flags:
        return ["--enable-piecewise-cuda-graph"]
    return []


def forcing_flag(parser: argparse.ArgumentParser) -> str:
    """The release's option that keeps piecewise capture on against its own rules, if any."""
    return "--enforce-piecewise-cuda-graph" if "--enforce-piecewise-cuda-graph" in _flags(parser) else ""


def parse(server_args_cls: Any, release: str, config_dir: str, user_args: list[str], *, piecewise: bool = False,
          extra: tuple[str, ...] = ()) -> tuple[Any, list[str], argparse.ArgumentParser]:
    """(ServerArgs, the whole argument line, the parser) for the user's
    arguments, read by SGLang ``release``'s ``server_args_cls``; TargetError
    with SGLang's message when the release refuses them."""
    if any(a == "--config" or a.startswith("--config=") for a in user_args):
        raise TargetError("--sglang-args: --config (a file of server arguments) is not read; "
                          "give the arguments themselves")
    parser = _parser(server_args_cls)
    argv = ["--model-path", config_dir, *doctor_args(config_dir), *extra, *(piecewise_args(parser) if piecewise else ()),
            *user_args]

    def refuse(message: str) -> None:
        raise _Refused(message)

    with UndoLog() as parsing:
        parsing.setattr(parser, "error", refuse)
        parsing.setattr(parser, "exit", lambda status=0, message=None: refuse(message or f"exit {status}"))
        try:
            namespace = parser.parse_args(argv)
            server_args = server_args_cls.from_cli_args(namespace)
        except _Refused as e:
            raise rejected(release, one_line(str(e), 400)) from e
        except (ValueError, TypeError, AssertionError) as e:
            raise rejected(release, f"{type(e).__name__}: {one_line(str(e), 400)}") from e
    return server_args, argv, parser


@contextlib.contextmanager
def sglang_log(about: re.Pattern = _COMPILE_WORDS) -> Iterator[list[str]]:
    """What SGLang's loggers say (warning and above) meanwhile, ``about``
    compiling or capturing by default; nothing else is kept, and nothing is
    printed."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = one_line(_COLOURS.sub("", record.getMessage()), 400)
            if about.search(text) and text not in said:
                said.append(text)

    logger = logging.getLogger("sglang")
    handler = Keep(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield said
    finally:
        logger.removeHandler(handler)


# Server-argument fields whose changes while SGLang resolves are its rules
# about compiling and capturing (see rules()).
_RULE_FIELDS = re.compile(r"piecewise|torch_compile|cuda_graph")


@contextlib.contextmanager
def rules(server_args_cls: Any) -> Iterator[list[str]]:
    """Meanwhile, every change SGLang's own code makes to a compile or capture
    field of a ``server_args_cls`` object that already held a value (not a
    default filled in where the field was left unset): one line
    each, with the function and line that made it and the ``if`` conditions
    around that line, read from the release's source ("disable_piecewise_cuda_graph
    = True by _handle_piecewise_cuda_graph (server_args.py:1310) when
    `self.get_model_config().is_piecewise_cuda_graph_disabled_model`
    (GlmMoeDsaForCausalLM is in piecewise_cuda_graph_disabled_model_archs,
    model_config.py:1558)"). Where a condition names a function of the
    release that reads a list of names holding the model's architecture (from
    the ``model_path`` folder's config.json), the line says which list: the
    rule speaks of the model, not only of a predicate. A rule that turns a
    path off without logging it says so here."""
    found: list[str] = []
    real = server_args_cls.__setattr__

    def record(self: Any, name: str, value: Any) -> None:
        old = self.__dict__.get(name)
        if old is not None and _RULE_FIELDS.search(name) and _differs(old, value):
            text = _rule(sys._getframe(1), name, value)
            if text not in found:
                found.append(text)
        real(self, name, value)

    with UndoLog() as recording:
        recording.setattr(server_args_cls, "__setattr__", record)
        yield found


def _differs(old: Any, new: Any) -> bool:
    try:
        return bool(old != new)
    except Exception:  # a value that cannot say (an array): count it as a change
        return old is not new


def _rule(frame: Any, name: str, value: Any) -> str:
    code = frame.f_code
    where = f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})"
    conditions = _conditions(code, frame.f_lineno)
    when = f" when `{' and '.join(conditions)}`" if conditions else ""
    lists = _architecture_lists(frame, conditions)
    because = f" ({'; '.join(lists)})" if lists else ""
    return f"{name} = {one_line(repr(_plain(value)), 80)} by {where}{when}{because}"


def _architectures(server_args: Any) -> list[str]:
    """The model's architectures, from config.json in its ``model_path`` folder
    ([] when there is none or it cannot be read)."""
    folder = getattr(server_args, "model_path", None)
    if not isinstance(folder, str) or not os.path.isfile(os.path.join(folder, "config.json")):
        return []
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            names = json.load(f).get("architectures")
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _architecture_lists(frame: Any, conditions: list[str]) -> list[str]:
    """For the names the ``conditions`` use: each module-level function of
    that name in the rule's own package whose code reads a global list (set,
    tuple) of names holding one of the model's architectures -- "X is in
    LIST (file:line)"."""
    architectures = _architectures(frame.f_locals.get("self"))
    if not architectures or not conditions:
        return []
    names: set[str] = set()
    for text in conditions:
        with contextlib.suppress(SyntaxError):  # a condition cut short for its line names nothing
            for node in ast.walk(ast.parse(text, mode="eval")):
                names.update({node.attr} if isinstance(node, ast.Attribute) else
                             {node.id} if isinstance(node, ast.Name) else ())
    package = str(frame.f_globals.get("__name__", "")).split(".")[0]
    out: list[str] = []
    for module in [m for key, m in list(sys.modules.items()) if m is not None and key.split(".")[0] == package]:
        for name in sorted(names):
            function = getattr(module, name, None)
            if not inspect.isfunction(function) or function.__module__ != module.__name__:
                continue
            for global_name in _globals_read(function.__code__):
                value = function.__globals__.get(global_name)
                if not isinstance(value, (list, tuple, set, frozenset)):
                    continue
                for arch in architectures:
                    text = f"{arch} is in {global_name} ({_defined_at(module, global_name)})"
                    if arch in value and text not in out:
                        out.append(text)
    return out


def _globals_read(code: Any) -> list[str]:
    """The global names ``code`` and the code nested in it (comprehensions) read."""
    found = list(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            found += [n for n in _globals_read(const) if n not in found]
    return found


def _defined_at(module: Any, name: str) -> str:
    """"file:line" of ``name``'s first module-level assignment in ``module``'s source."""
    path = getattr(module, "__file__", None) or ""
    pattern = re.compile(rf"^{re.escape(name)}\s*(:[^=]*)?=")
    for number, line in enumerate(linecache.getlines(path), 1):
        if pattern.match(line):
            return f"{os.path.basename(path)}:{number}"
    return os.path.basename(path)


def _conditions(code: Any, line: int) -> list[str]:
    """The tests of the ``if`` statements around ``line`` in ``code``'s
    function, outermost first ([] when its source cannot be read)."""
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return []
    try:
        block = inspect.getblock(lines[code.co_firstlineno - 1:])
        source = textwrap.dedent("".join(block))
        tree = ast.parse(source)
    except (SyntaxError, IndentationError, tokenize.TokenError):
        return []
    at = line - code.co_firstlineno + 1
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = one_line(ast.get_source_segment(source, node.test) or "", 160)
        if node.body[0].lineno <= at <= (node.body[-1].end_lineno or 0):
            out.append((node.lineno, test))
        elif node.orelse and node.orelse[0].lineno <= at <= (node.orelse[-1].end_lineno or 0):
            out.append((node.lineno, f"not ({test})"))
    return [text for _line, text in sorted(out)]


def _plain(value: Any) -> Any:
    """A JSON value for a resolved field (enums by value, records as dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif hasattr(value, "to_dict"):
        value = value.to_dict()
    elif hasattr(value, "value") and not isinstance(value, (str, int, float, bool)):
        value = value.value
    return json.loads(json.dumps(value, default=str))


def resolved(server_args: Any) -> dict[str, Any]:
    """The compile- and capture-related fields as SGLang resolved them."""
    if hasattr(server_args, "resolved_dict"):
        fields = server_args.resolved_dict()
    else:
        fields = {f.name: getattr(server_args, f.name, None) for f in dataclasses.fields(server_args)}
    return {name: _plain(value) for name, value in sorted(fields.items()) if _COMPILE_FIELDS.search(name)}


def _phase_backend(fields: dict[str, Any], phase: str) -> str:
    config = fields.get("cuda_graph_config")
    if isinstance(config, dict) and isinstance(config.get(phase), dict):
        return str(config[phase].get("backend", ""))
    return ""


def prefill_compiled(fields: dict[str, Any]) -> bool | None:
    """Whether the resolved launch captures its prefill with tc_piecewise
    (torch.compile of the model forward); None when the release says neither."""
    backend = _phase_backend(fields, "prefill")
    if backend:
        return backend == "tc_piecewise"
    if "enable_piecewise_cuda_graph" in fields:
        return bool(fields["enable_piecewise_cuda_graph"])
    if "disable_piecewise_cuda_graph" in fields:
        return not fields["disable_piecewise_cuda_graph"]
    return None


def phases(fields: dict[str, Any]) -> dict[str, str]:
    """Per phase, one line: how the resolved launch runs its forward."""
    prefill, decode = _phase_backend(fields, "prefill"), _phase_backend(fields, "decode")
    compiled = prefill_compiled(fields)
    if compiled:
        extend = f"{prefill or 'piecewise'} CUDA graph: the model forward is compiled with torch.compile (fullgraph)"
    elif prefill and prefill != "disabled":
        extend = f"{prefill} CUDA graph (no torch.compile of the forward)"
    elif prefill == "disabled" or compiled is False:
        extend = "no prefill CUDA graph (the forward runs eagerly; no torch.compile of the forward)"
    else:
        extend = "the release says nothing of prefill capture (the forward runs eagerly)"
    torch_compile = bool(fields.get("enable_torch_compile"))
    graph = f"{decode} CUDA graph" if decode and decode != "disabled" else (
        "no decode CUDA graph" if decode == "disabled" or fields.get("disable_cuda_graph") else "CUDA graph")
    if torch_compile:
        limit = fields.get("torch_compile_max_bs")
        line = (f"{graph}; --enable-torch-compile: the forward is compiled with torch.compile (not fullgraph) "
                f"for batch sizes up to {limit}")
    else:
        line = f"{graph} (no torch.compile of the forward)"
    return {"extend": extend, "decode": line}


__all__ = ["DOCTOR_ARGS", "forcing_flag", "parse", "phases", "piecewise_args", "prefill_compiled", "rejected",
           "resolved", "rules", "sglang_log"]

"""Where a frame lives: stdlib, torch, a third-party package, or the user's code.

The actionable frame of a break is the innermost frame someone can change:
not the standard library, not torch (Dynamo's own polyfills included).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

from graphbreak_doctor.model import Break, Frame

_SITE_MARKERS = ("site-packages", "dist-packages")


def _realpath(path: str) -> str:
    """os.path.realpath, or the path as it is where it cannot be resolved: a
    frame's file name comes from findings or a log written elsewhere and may
    hold anything (a NUL byte)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths["stdlib"], paths["platstdlib"]}
    # A venv's stdlib lives under the base interpreter's prefix.
    for prefix in (sys.base_prefix, sys.base_exec_prefix):
        dirs.add(os.path.join(prefix, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}"))
    return tuple(sorted(os.path.realpath(d) + os.sep for d in dirs))


# The standard library of another machine's Python, as a log copied off a
# server names it: ".../lib/python3.10/subprocess.py", "...\\Lib\\subprocess.py".
_OTHER_STDLIB = re.compile(r"[/\\](?:lib[/\\]python3\.\d+t?|Lib)[/\\](?P<rel>.+\.py)$")


def stdlib_relpath(filename: str) -> str:
    """A standard-library file's path inside its library folder ('subprocess.py',
    'json/decoder.py'), of this interpreter or another one; '' for anything else."""
    real = _realpath(filename)
    for base in _stdlib_dirs():
        if real.startswith(base):
            rel = real[len(base):]
            return "" if rel.startswith(_SITE_MARKERS) else rel
    m = _OTHER_STDLIB.search(filename)
    if m is None or any(marker in m.group("rel") for marker in _SITE_MARKERS):
        return ""
    return m.group("rel").replace("\\", "/").replace("/", os.sep)


def package_of(filename: str) -> str:
    """The owner of a source file: 'stdlib', 'torch', a distribution's top-level
    package ('flashinfer', 'sglang'), or the top-level module of user code."""
    if filename.startswith("<frozen ") or filename in ("<string>", "<stdin>"):
        return "stdlib" if filename.startswith("<frozen ") else "user"
    real = _realpath(filename)
    parts = Path(real).parts
    for marker in _SITE_MARKERS:
        if marker in parts:
            idx = len(parts) - 1 - parts[::-1].index(marker)
            if idx + 1 < len(parts):
                top = parts[idx + 1]
                return top[:-3] if top.endswith(".py") else top
    if stdlib_relpath(filename):
        return "stdlib"
    return _user_top_level(real)


def _user_top_level(real: str) -> str:
    """Top-level module name of a file found on sys.path (longest entry wins)."""
    best = ""
    for entry in sys.path:
        base = os.path.realpath(entry or os.getcwd()) + os.sep
        if real.startswith(base) and len(base) > len(best):
            best = base
    if not best:
        return "user"
    first = Path(real[len(best):]).parts[0]
    return first[:-3] if first.endswith(".py") else first


# Code a user does not change to fix a break: the interpreter's library,
# torch itself (Dynamo's polyfills included), and FFI runtimes whose frames
# only forward a call into a compiled kernel (tvm_ffi/module.py).
INFRASTRUCTURE = frozenset({"stdlib", "torch", "tvm_ffi"})


def stdlib_module(frame: Frame) -> str:
    """Dotted stdlib module of a frame ('subprocess', 'logging'), or ''."""
    if frame.file.startswith("<frozen "):
        return frame.file[len("<frozen "):-1]
    rel = stdlib_relpath(frame.file)
    return rel.removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__") if rel else ""


def short_path(path: str, *, portable: bool = False) -> str:
    """A path for reading: relative to site-packages, the stdlib or the working
    directory. ``portable`` also drops the folders of anything else, so the text
    reads the same on every machine (baseline hints)."""
    for marker in _SITE_MARKERS:
        token = f"{marker}{os.sep}"
        if token in path:
            return path.split(token, 1)[1]
    real = _realpath(path) if os.path.isabs(path) else path
    for base in _stdlib_dirs():
        if real.startswith(base):
            return real[len(base):]
    try:
        rel = os.path.relpath(path)
    except (OSError, ValueError):
        return path
    if not rel.startswith(".."):
        return rel
    return os.path.basename(path) if portable else path


def at(frame: Frame, *, portable: bool = False, function: bool = False) -> str:
    """How a frame is shown, everywhere: ``path:line`` (the path as short_path
    gives it; ``portable``: the same on every machine); ``function`` adds
    ``, in qualname``."""
    shown = f"{short_path(frame.file, portable=portable)}:{frame.line}"
    return f"{shown}, in {frame.qualname or frame.function}" if function else shown


def frame_key(frame: Frame) -> tuple[str, int, str]:
    """What names a frame on any machine: its file as short_path shows it
    (site-packages and checkout prefixes dropped), line and function."""
    return (short_path(frame.file, portable=True), frame.line, frame.function)


def is_changeable(frame: Frame) -> bool:
    """A frame someone can edit: outside the stdlib, torch and FFI runtimes."""
    return package_of(frame.file) not in INFRASTRUCTURE


def actionable_frame(stack: list[Frame]) -> Frame | None:
    for frame in reversed(stack):
        if is_changeable(frame):
            return frame
    return None


@functools.lru_cache(maxsize=512)
def _function_spans(filename: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, qualified name) of every def and class in the
    file. From the compiled code objects where they carry their qualified
    name (Python 3.11+): compiling is about twice as fast as walking the
    syntax tree in Python, and a trace pays it for every file on a break's
    stack. The two agree on every line a frame can stop at; the code objects
    also cover a decorated function's decorator lines."""
    try:
        source = Path(filename).read_text(encoding="utf-8")
        if sys.version_info >= (3, 11):
            return _code_spans(compile(source, filename, "exec", dont_inherit=True))
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return ()
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                spans.append((child.lineno, child.end_lineno or child.lineno, name))
                inner = f"{name}.<locals>." if not isinstance(child, ast.ClassDef) else f"{name}."
                visit(child, inner)
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(spans)


def _code_spans(module: types.CodeType) -> tuple[tuple[int, int, str], ...]:
    """The spans of the code objects nested in ``module``; lambdas and
    comprehensions (names in angle brackets) are looked through, not named."""
    spans: list[tuple[int, int, str]] = []
    pending = [module]
    while pending:
        for const in pending.pop().co_consts:
            if isinstance(const, types.CodeType):
                pending.append(const)
                if not const.co_name.startswith("<"):
                    last = max((line for _, _, line in const.co_lines() if line is not None),
                               default=const.co_firstlineno)
                    spans.append((const.co_firstlineno, last, const.co_qualname))
    return tuple(spans)


def qualname_at(filename: str, line: int, function: str) -> str:
    """Qualified name of the innermost def/class enclosing ``line``.

    Frame summaries carry only ``co_name``; baselines need a name that tells
    ``Foo.forward`` from ``Bar.forward`` and survives line shifts."""
    best = None
    for start, end, name in _function_spans(filename):
        if start <= line <= end and (not function or name.rsplit(".", 1)[-1] == function):
            if best is None or start >= best[0]:
                best = (start, name)
    return best[1] if best else (function or "<module>")


@functools.lru_cache(maxsize=4096)
def source_line(filename: str, line: int) -> str:
    import linecache

    return linecache.getline(filename, line).strip()


def make_frame(filename: str, line: int, function: str, code: str = "") -> Frame:
    qualname = qualname_at(filename, line, function)
    return Frame(
        file=filename,
        line=line,
        function=function or qualname.rsplit(".", 1)[-1],
        qualname=qualname,
        code=code or source_line(filename, line),
    )


def node_id(frame: Frame) -> str:
    return f"{frame.file}::{frame.qualname or frame.function}"


def call_graph(breaks: list[Break]) -> Any:
    """Functions on the breaks' stacks, with call edges and the breaks they lead
    to (a networkx DiGraph: the root causes and the report's picture read it)."""
    import networkx as nx  # imported when needed: the command line starts without it

    graph = nx.DiGraph()
    for b in breaks:
        previous = None
        for frame in b.stack:
            node = node_id(frame)
            if node not in graph:
                graph.add_node(node, frame=frame, breaks=set(), changeable=is_changeable(frame))
            graph.nodes[node]["breaks"].add(b.id)
            if previous is not None and previous != node:
                graph.add_edge(previous, node)
            previous = node
        if b.stack:
            graph.nodes[node_id(b.stack[-1])].setdefault("sites", set()).add(b.id)
    return graph


def raised_at(error: BaseException) -> str:
    """" (raised at PATH:LINE in FUNCTION)": the innermost frame of ``error``'s
    traceback (its path shortened as in a report), so a failure inside a
    framework says where it stopped; "" without a traceback."""
    import traceback

    stack = traceback.extract_tb(error.__traceback__)
    if not stack:
        return ""
    last = stack[-1]
    return f" (raised at {short_path(last.filename)}:{last.lineno} in {last.name})"


def _statement_at(filename: str, line: int) -> ast.stmt | None:
    """The innermost statement of ``filename`` that spans ``line``; None
    where the source cannot be read or parsed."""
    try:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    found: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or (node.end_lineno or node.lineno) - node.lineno <= \
                    (found.end_lineno or found.lineno) - found.lineno:
                found = node
    return found


def own_check(error: BaseException, package: str) -> Frame | None:
    """The check of ``package``'s own code that raised ``error``, as a frame;
    None for any other failure. A check: the innermost frame of ``error``'s
    traceback is ``package``'s code, the statement there is an ``assert``, or
    a ``raise`` of anything but NotImplementedError (an interface method left
    to a subclass, not a refusal), and ``error`` was not raised while another
    exception was handled (then the check reports a failure deeper down).
    This is how a framework's refusal of a launch on a device (its backend's
    capability assertion) is told from a failure inside it, by the statement
    that raised, never by the exception's type alone."""
    import traceback

    if error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__):
        return None
    stack = traceback.extract_tb(error.__traceback__)
    if not stack or package_of(stack[-1].filename) != package:
        return None
    last = stack[-1]
    statement = _statement_at(last.filename, last.lineno or 0)
    if isinstance(statement, ast.Assert):
        pass
    elif not isinstance(statement, ast.Raise) or isinstance(error, NotImplementedError):
        return None
    return Frame(file=last.filename, line=last.lineno or 0, function=last.name, code=(last.line or "").strip())

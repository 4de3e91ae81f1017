"""Which kind of break is this? A rule table read top to bottom; first match wins.

What a break looks like is not what it is (fact 7 of the design notes):
``subprocess.check_output`` surfaces as a skipped ``_thread.allocate_lock``
inside ``subprocess.py``, ``Path.exists()`` as a skipped ``posix.stat``. So
the rules look at the stack the break was reached through and at the
callable Dynamo refused (the culprit), not only at the message.
"""

from __future__ import annotations

import builtins
import os
import re
import sys
from dataclasses import dataclass

from graphbreak_doctor.analysis.frames import package_of, stdlib_relpath
from graphbreak_doctor.findings import Frame

CATEGORIES = (
    "subprocess",
    "filesystem",
    "compiler-disable",
    "opaque-call",
    "unsupported-builtin",
    "data-dependent",
    "logging",
    "other",
)

# Dynamo's names for calls it refuses to trace (torch/_dynamo/graph_break_registry.json).
_REFUSED_CALL = frozenset({
    "Attempted to call function marked as skipped",
    "Unsupported function call",
    "Unsupported method call",
    "Failed to trace builtin operator",
    "Unsupported context manager",
    "Attempted to inline function marked as skipped",
})


@dataclass(frozen=True)
class Rule:
    category: str
    why: str
    gb_types: frozenset[str] = frozenset()
    # Stdlib modules the stack passes through ("subprocess", "pathlib", ...).
    through: tuple[str, ...] = ()
    # Prefixes of the refused callable, as "module.qualname".
    culprits: tuple[str, ...] = ()
    # The refused callable is compiled code owned by a non-stdlib package.
    extension_culprit: bool = False
    # The refused callable is a builtin or stdlib C function / type.
    stdlib_culprit: bool = False


RULES: tuple[Rule, ...] = (
    Rule("compiler-disable", "Dynamo met a function wrapped in torch.compiler.disable",
         gb_types=frozenset({"Skip calling `torch.compiler.disable()`d function",
                             "Skip inlining `torch.compiler.disable()`d function"})),
    Rule("data-dependent", "control flow or output shape depends on tensor values",
         gb_types=frozenset({"Data-dependent branching", "Data-dependent branching with non-constant __bool__",
                             "Dynamic shape operator", "Dynamic shape operator (no meta kernel)",
                             "Unsupported Tensor.item() call with capture_scalar_outputs=False",
                             "Tensor.tolist() with non-integer tensor",
                             "Data-dependent assertion failed (cannot compile partial graph)",
                             "Attempted to use `torch.nn.functional.one_hot` with data-dependent output shape"})),
    Rule("subprocess", "the stack runs a child process",
         through=("subprocess",), culprits=("_posixsubprocess.", "posix.fork", "posix.system", "posix.popen",
                                            "posix.posix_spawn", "posix.waitpid", "os.system", "os.popen")),
    Rule("filesystem", "the stack touches the file system",
         through=("pathlib", "genericpath", "posixpath", "ntpath", "shutil", "glob", "fnmatch", "tempfile", "fcntl",
                  "filecmp"),
         culprits=("posix.stat", "posix.lstat", "posix.listdir", "posix.scandir", "posix.open", "posix.access",
                   "posix.mkdir", "posix.makedirs", "posix.remove", "posix.unlink", "posix.rename", "posix.readlink",
                   "posix.getcwd", "posix.fspath", "posix.utime", "io.open", "_io.open", "builtins.open",
                   "fcntl.", "filelock.")),
    Rule("logging", "logging, printing or warnings",
         gb_types=frozenset({"logging.Logger method not supported for non-export cases"}),
         through=("logging", "warnings"),
         culprits=("builtins.print", "print", "_warnings.warn", "warnings.warn", "logging.")),
    Rule("opaque-call", "a compiled extension (C++/pybind/tvm-ffi/ctypes) called from a traced frame",
         # A torch C binding that returns a non-tensor (a raw stream handle,
         # torch._C._cuda_getCurrentRawStream) is just as opaque to the graph.
         # So are compiled objects flowing through traced code: a tvm-ffi Module
         # Dynamo cannot wrap, a C __hash__ it cannot trace into.
         gb_types=frozenset({"torch.* op returned non-Tensor", "Unexpected type in sourceless builder",
                             "Untraceable C tp_hash"}),
         through=("ctypes",), culprits=("_ctypes.", "ctypes.", "tvm_ffi.", "PyCFuncPtrType.", "CFuncPtr"),
         extension_culprit=True),
    Rule("unsupported-builtin", "a builtin, stdlib object or runtime API Dynamo cannot model",
         # Locks and generator-based context managers (FlashInfer's autotuner
         # `with self._lock:`), a `class` statement executed on the traced path
         # (LOAD_NAME has no handler), and torch runtime APIs Dynamo skips on
         # purpose (torch.cuda.use_mem_pool).
         gb_types=frozenset({"Unsupported context manager", "Missing bytecode handler",
                             "Invalid call to __build_class__",
                             "can't handle functions not implemented in python"}),
         culprits=("torch.cuda.", "torch._utils.", "torch._C."),
         stdlib_culprit=True),
)

_CULPRIT_PATTERNS = (
    re.compile(r"module: (?P<module>[\w.]+), qualname: (?P<qualname>[\w.<>]+)"),
    re.compile(r"trace the builtin `(?P<name>[^`]+?)\.?`"),
    re.compile(r"trace the function `<class '(?P<name>[^']+)'>`"),
    re.compile(r"trace the function `(?P<name>[^`]+)`"),
    re.compile(r"trace method `(?P<method>[^`]+)` of class `(?P<cls>[^`]+)`"),
    re.compile(r"builtin operator `(?P<name>[^`]+)`"),
    re.compile(r"function `<function (?P<name>[\w.<>]+)>`"),
    re.compile(r"enter a `(?P<name>\w+)` context manager"),
    re.compile(r"method: <(?P<cls>Logger) [^>]*>\.(?P<method>\w+)"),
    re.compile(r"UserDefinedClassVariable\(<class '(?P<name>[^']+)'>\)"),
    re.compile(r"BuiltinVariable\((?P<name>\w+)\)"),
)


def culprit_of(explanation: str, context: str) -> str:
    """The callable Dynamo refused, as 'module.qualname' where it can tell."""
    for text in (context, explanation):
        for pattern in _CULPRIT_PATTERNS:
            m = pattern.search(text)
            if not m:
                continue
            groups = m.groupdict()
            if groups.get("module"):
                return f"{groups['module']}.{groups['qualname']}"
            if groups.get("method"):
                cls = "logging.Logger" if groups["cls"] == "Logger" else groups["cls"]
                return f"{cls}.{groups['method']}"
            name = groups["name"]
            return f"builtins.{name}" if "." not in name and hasattr(builtins, name) else name
    return ""


def stdlib_module(frame: Frame) -> str:
    """Dotted stdlib module of a frame ('subprocess', 'logging'), or ''."""
    if frame.file.startswith("<frozen "):
        return frame.file[len("<frozen "):-1]
    rel = stdlib_relpath(frame.file)
    return rel.removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__") if rel else ""


def _culprit_is_stdlib(culprit: str) -> bool:
    # "frozenset[str]" (a generic alias called as a constructor) is a builtin too.
    head = culprit.split(".", 1)[0].split("[", 1)[0]
    return head in sys.stdlib_module_names or head == "builtins" or ("." not in culprit and hasattr(builtins, head))


def _culprit_is_extension(culprit: str) -> bool:
    head = culprit.split(".", 1)[0]
    if not culprit or _culprit_is_stdlib(culprit) or head == "torch":
        return False
    return "." in culprit


def _matches(rule: Rule, gb_type: str, culprit: str, modules: list[str]) -> bool:
    if gb_type in rule.gb_types:
        return True
    if rule.through and any(m == t or m.startswith(t + ".") for m in modules for t in rule.through):
        return True
    if rule.culprits and culprit.startswith(rule.culprits):
        return True
    refused = gb_type in _REFUSED_CALL
    if rule.extension_culprit and refused and _culprit_is_extension(culprit):
        return True
    if rule.stdlib_culprit and refused and _culprit_is_stdlib(culprit):
        return True
    return False


def classify(gb_type: str, culprit: str, stack: list[Frame]) -> tuple[str, str]:
    """(category, why) for one break."""
    modules = [m for m in (stdlib_module(f) for f in stack) if m]
    for rule in RULES:
        if _matches(rule, gb_type, culprit, modules):
            return rule.category, rule.why
    return "other", "no rule matched; see the raw reason"


__all__ = ["CATEGORIES", "RULES", "Rule", "classify", "culprit_of", "stdlib_module", "package_of"]

"""What a worker's job reads beyond its files: environment variables and
child processes (jobs/inputs.py records the files; docs/cache.md says what
is keyed and what is not).

The environment: the variables every entry's name holds (``ENV_PREFIXES``,
``ENV_NAMES``: the one list, read by findings_cache.pre_key), and every
other variable the job reads one by one (``os.environ[...]``, ``get``,
``in``, ``os.getenv``), recorded with a hash of the value it had -- a
variable read is a change when its value is not that one any more. The
doctor's own reads are not recorded (its variables are in the keyed list),
nor a copy or walk of the whole environment (a library scanning its
settings, a copy handed to a child process): those read every name, and a
cache keyed on every variable would never hit.

A child process is described by its program (found on PATH as the child
would find it), its arguments and the files and folders its arguments name;
a command run through a shell cannot be described: it is ``Unknowable``.
Standard library only.
"""

from __future__ import annotations

import dis
import hashlib
import os
import shutil
import sys
from typing import Any

from graphbreak_doctor.cache import CACHE_ENV, OFF_ENV
from graphbreak_doctor.jobs.cache_trust import KEY_ENV

# The environment the traced code, the emulation and Dynamo read, part of
# every entry's name (findings_cache.pre_key): variables with these
# prefixes, and these names (docs/cache.md lists them).
ENV_PREFIXES = ("TORCH_", "TORCHDYNAMO_", "TORCHINDUCTOR_", "PYTORCH_", "FLASHINFER_", "SGLANG_", "SGL_", "VLLM_",
                "CUDA_", "NVIDIA_", "XDG_", "GRAPHBREAK_DOCTOR_")
ENV_NAMES = ("PATH", "PYTHONPATH", "HOME", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONHASHSEED", "OMP_NUM_THREADS")
# The run's own variables (the worker's temporary folder, the doctor's parent, the cache's own switches): not inputs.
_RUN_VARIABLES = frozenset({"TMPDIR", "GRAPHBREAK_DOCTOR_PARENT", OFF_ENV, CACHE_ENV, KEY_ENV})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "fish", "busybox"})


class Unknowable(Exception):
    """What a child process reads cannot be known (a shell command): the job is not kept."""


def keyed_variable(name: str) -> bool:
    return name in ENV_NAMES or name.startswith(ENV_PREFIXES)


# -- environment variables ------------------------------------------------------

_recording: list[bool] = []
_read: set[str] = set()
_start: dict[str, str] = {}
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# The files of os and of the mapping methods, as their frames name them (a
# frozen module's frames say "<frozen os>").
_MAPPING_PLUMBING = {os._Environ.copy.__code__.co_filename,  # type: ignore[attr-defined]
                     sys.modules["_collections_abc"].Mapping.get.__code__.co_filename}
_SUBSCRIPT = {dis.opmap[name] for name in ("BINARY_SUBSCR", "BINARY_OP") if name in dis.opmap}
_CACHE = dis.opmap.get("CACHE", -1)  # the inline cache entries that follow an instruction
# The mapping methods that read one variable, and those that read them all.
_ONE_VARIABLE = {"get", "__contains__", "pop", "setdefault", "getenv"}


def _instruction(frame: Any) -> int:
    """The instruction a frame is executing (past its inline cache entries)."""
    code, at = frame.f_code.co_code, frame.f_lasti
    if not 0 <= at < len(code):  # not started, or an offset this interpreter counts otherwise: not a subscript
        return -1
    while at > 0 and code[at] == _CACHE:
        at -= 2
    return code[at]


def _how_read(frame: Any) -> str:
    """How os.environ is being read: "doctor" (by the doctor's own code),
    "one" (one variable: ``[]``, ``get``, ``in``, ``getenv``) or "all" (a
    copy or a walk of the whole environment)."""
    if frame is None:
        return "all"
    if frame.f_code.co_filename in _MAPPING_PLUMBING:
        one = frame.f_code.co_name in _ONE_VARIABLE
    else:
        one = _instruction(frame) in _SUBSCRIPT  # os.environ[name]; dict(os.environ) is a call
    while frame is not None and frame.f_code.co_filename in _MAPPING_PLUMBING:
        frame = frame.f_back
    if frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        return "doctor"
    return "one" if one else "all"


def _torch_compiling() -> bool:
    """False until torch is loaded; then torch's own ``is_compiling``, which
    takes this function's place."""
    compiler = sys.modules.get("torch.compiler")
    if compiler is None or not hasattr(compiler, "is_compiling"):
        return False
    _compiling[0] = compiler.is_compiling
    return compiler.is_compiling()


# Whether Dynamo is tracing: it traces a read of os.environ inside a
# compiled function through __getitem__, and must see os.environ's own
# code there (is_compiling is True only while it traces; frames cannot be
# traced), or the recording would be a graph break a real server never has.
_compiling: list[Any] = [_torch_compiling]


class _RecordingEnviron(os._Environ):  # type: ignore[name-defined]
    """os.environ, noting each variable the job reads one by one."""

    def __getitem__(self, key: Any) -> Any:
        if _recording and not _compiling[0]() and isinstance(key, str) and _how_read(sys._getframe(1)) == "one":
            _read.add(key)
        return super().__getitem__(key)


def record_environment(undo: Any) -> None:
    """From now on, note the variables read (``undo``: the UndoLog that puts
    os.environ back)."""
    _start.update(os.environ)
    os.environ.__class__ = _RecordingEnviron
    undo.call_on_undo(lambda: setattr(os.environ, "__class__", os._Environ))  # type: ignore[attr-defined]
    _recording[:] = [True]


def environment_read() -> dict[str, str | None]:
    """The variables read outside the keyed list, with a hash of the value
    each had when the job started (None: not set)."""
    _recording.clear()
    return {k: _value_hash(_start.get(k)) for k in sorted(_read - _RUN_VARIABLES) if not keyed_variable(k)}


def _value_hash(value: str | None) -> str | None:
    """What the manifest keeps of a variable's value: its sha256 (a value
    may be a secret), None when it is not set."""
    return None if value is None else hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


def environment_changed(environment: Any) -> str:
    """The first variable the job read whose value is not the one it read."""
    if not isinstance(environment, dict):
        return "the manifest is not whole"
    for name, value in environment.items():
        if not isinstance(name, str) or not (value is None or isinstance(value, str)):
            return "the manifest is not whole"
        if _value_hash(os.environ.get(name)) != value:
            return f"the environment variable {name} changed"
    return ""


# -- child processes ------------------------------------------------------------

def describe_child(executable: Any, argv: Any, cwd: Any, env: Any) -> tuple[dict[str, Any], list[str]]:
    """A child process as the manifest keeps it -- {"program", "executable"
    (the file found; "" when none), "argv", "search_path" (the PATH it was
    looked for on, when the child was given its own)} -- and the paths its
    arguments name that exist. Unknowable for a shell command."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else a for a in (argv or [])]
    argv = [a for a in argv if isinstance(a, str)]
    program = os.fsdecode(executable) if isinstance(executable, (str, bytes, os.PathLike)) else (argv[:1] or [""])[0]
    if os.path.basename(program) in _SHELLS and "-c" in argv[1:2]:
        raise Unknowable(f"a command ran through a shell ({' '.join(argv[:3])[:200]}): what it reads cannot be known")
    here = os.fsdecode(cwd) if isinstance(cwd, (str, bytes, os.PathLike)) else None
    try:
        here = os.path.abspath(here) if here else os.getcwd()
    except OSError as e:
        raise Unknowable("a child process started while the current folder did not exist") from e
    path = None
    if os.sep in program:
        found = os.path.normpath(os.path.join(here, program))
    else:
        path = env.get("PATH") if isinstance(env, dict) and isinstance(env.get("PATH"), str) else None
        found = shutil.which(program, path=path) or ""
        found = os.path.normpath(os.path.abspath(found)) if found else ""
    named = []
    for arg in argv[1:]:
        for value in {arg, arg.partition("=")[2]}:
            candidate = os.path.normpath(os.path.join(here, value)) if value and "\x00" not in value else ""
            if candidate and os.path.exists(candidate):
                named.append(candidate)
    return {"program": program, "executable": found, "argv": argv[:64], "own": "", "search_path": path}, named


def children_changed(children: Any) -> str:
    """A program a child process ran that is now found elsewhere (or is
    found now where it was not): its content and the files its arguments
    named are among the recorded files."""
    if not isinstance(children, list):
        return "the manifest is not whole"
    for child in children:
        if not isinstance(child, dict) or not all(isinstance(child.get(k), str) for k in ("program", "executable")):
            return "the manifest is not whole"
        program = child["program"]
        if os.sep in program or child.get("own"):
            continue  # a path (its file is recorded), or the run's own tool
        search = child.get("search_path")
        now = shutil.which(program, path=search if isinstance(search, str) else None) or ""
        if (os.path.normpath(os.path.abspath(now)) if now else "") != child["executable"]:
            return f"the program {program} is now {now or 'not found'} (was {child['executable'] or 'not found'})"
    return ""

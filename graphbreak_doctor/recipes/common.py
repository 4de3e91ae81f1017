"""What the recipes share: finding the function to change on a break's stack,
running the target once to see how it is called, and writing call text."""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import re
import sys
import types
from typing import Any

from graphbreak_doctor.model import Break, Frame
from graphbreak_doctor.frames import INFRASTRUCTURE, at, package_of, short_path
from graphbreak_doctor.patching import PatchSet
from graphbreak_doctor.recipes import adapters
from graphbreak_doctor.recipes.recipe import FixContext, NotApplicable


def where_of(frame: Frame) -> str:
    return f"{short_path(frame.file)}:{frame.qualname or frame.function}"


def source_of(frame: Frame | None, fallback: str = "") -> str:
    """The frame's line as in its file, indentation kept; else the line the
    findings kept (indented as a function body), else ``fallback``."""
    if frame is None:
        return fallback
    line = linecache.getline(frame.file, frame.line).rstrip("\r\n") if frame.file else ""
    if line.strip():
        return line
    return f"    {frame.code}" if frame.code else fallback


@functools.lru_cache(maxsize=4096)
def _realpath(path: str) -> str:
    return os.path.realpath(path)


# sys.modules by real file path; rebuilt when modules were imported or removed
# since (a trace asks once per break and frame: scanning every module each
# time cost seconds per trace).
_BY_FILE: dict[str, types.ModuleType] = {}
_INDEXED: list[int] = [-1]


def module_of_file(path: str) -> types.ModuleType | None:
    """The imported module whose file is ``path``. The index is rebuilt when
    the number of modules changed, and on a miss: one module removed and
    another imported leave the number as it was."""
    found = _BY_FILE.get(_realpath(path)) if _INDEXED[0] == len(sys.modules) else None
    if found is None or sys.modules.get(found.__name__) is not found:
        _BY_FILE.clear()
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if file:
                _BY_FILE.setdefault(_realpath(file), module)
        _INDEXED[0] = len(sys.modules)
        found = _BY_FILE.get(_realpath(path))
    return found


def _code_of(obj: Any) -> types.CodeType | None:
    inner = getattr(obj, "_torchdynamo_orig_callable", None) or obj
    try:
        inner = inspect.unwrap(inner)
    except ValueError:
        return None
    return getattr(inner, "__code__", None)


def resolve(frame: Frame) -> tuple[types.ModuleType, Any] | None:
    """(module, global) of the module-level function a frame is running."""
    if "." in (frame.qualname or frame.function) or not frame.function.isidentifier():
        return None
    module = module_of_file(frame.file)
    if module is None:
        return None
    obj = vars(module).get(frame.function)
    code = _code_of(obj)
    if code is None or os.path.realpath(code.co_filename) != os.path.realpath(frame.file):
        return None
    return module, obj


def library_entry(stack: list[Frame]) -> tuple[Frame, Frame, types.ModuleType, Any] | None:
    """(caller, entry, module, function): the first library function the
    traced code calls that is a module global (``flashinfer.fp4_quantize``),
    with the traced code's frame that calls it: its last frame before the
    entry; or where the traced callable is a wrapper object that only enters
    other code (its frame a ``__call__``: vLLM's compile wrapper around the
    model's forward) and no later frame is the traced code's, the frame that
    calls the entry."""
    if not stack:
        return None
    own = package_of(stack[0].file)
    caller = stack[0]
    previous = None  # the last frame before the entry outside the infrastructure
    for frame in stack[1:]:
        package = package_of(frame.file)
        if package == own:
            caller = previous = frame
            continue
        if package in INFRASTRUCTURE:
            continue
        found = resolve(frame)
        if found is not None:
            entered = caller is stack[0] and stack[0].function == "__call__" and previous is not None
            return (previous if entered else caller), frame, found[0], found[1]
        previous = frame
    return None


def disabled_callee(site: Frame) -> tuple[types.ModuleType, str, Any] | None:
    """The torch.compiler.disable'd function the site's line calls."""
    module = module_of_file(site.file)
    if module is None:
        return None
    for name in re.findall(r"([A-Za-z_][\w.]*)\s*\(", site.code or ""):
        obj: Any = module
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if getattr(obj, "_torchdynamo_disable", False):
            return module, name, obj
    return None


def has_tensor(value: Any, depth: int = 0) -> bool:
    torch = sys.modules.get("torch")  # not loaded (a log read back): no value is a tensor
    if torch is not None and isinstance(value, torch.Tensor):
        return True
    if depth > 3:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(has_tensor(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(has_tensor(v, depth + 1) for v in value.values())
    return False


def qualified(module: types.ModuleType, name: str) -> str:
    return f"{module.__name__}.{name}"


def warm_calls(ctx: FixContext, obj: Any, size: int | None = None) -> list[tuple[tuple, dict, Any]]:
    """Run the target once, eagerly (at ``size``, a server size, when given),
    recording every call of ``obj`` made through a module global."""
    calls: list = []
    with PatchSet("warm-up") as ps:
        if not ps.rebind(obj, adapters.recorder(obj, calls)):
            return []
        warm_up(ctx, size)
    return calls


def warm_up(ctx: FixContext, size: int | None = None) -> None:
    """One eager run of the target (at ``size`` where given and the target
    can be built again at it); NotApplicable where it fails."""
    try:
        if size is None or ctx.warm_up_at is None:
            ctx.warm_up()
        else:
            ctx.warm_up_at(size)
    except Exception as e:
        at = f" at size {size}" if size is not None else ""
        raise NotApplicable(f"a warm-up (eager) run of the target{at} fails here: {type(e).__name__}: {e}") from e


def calls_at_sizes(ctx: FixContext, obj: Any, sizes: list[int]) -> list[tuple[tuple, dict, Any]]:
    """The calls of ``obj`` in eager runs at each of ``sizes``; NotApplicable
    when the target cannot be run at other sizes in this process."""
    if sizes and ctx.warm_up_at is None:
        raise NotApplicable("the target cannot be built again at other sizes in this process")
    return [call for n in sizes for call in warm_calls(ctx, obj, n)]


def call_text(name: str, sig: inspect.Signature | None, args: tuple, kwargs: dict) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def def_lines(obj: Any) -> list[str]:
    """The decorator and def lines of a function, as in its source file."""
    try:
        lines, _ = inspect.getsourcelines(inspect.unwrap(obj))
    except (OSError, TypeError, ValueError):
        return [f"def {getattr(obj, '__name__', 'fn')}(...):"]
    out, seen_def = [], False
    for line in lines:
        out.append(line.rstrip("\n"))
        seen_def = seen_def or line.lstrip().startswith(("def ", "async def "))
        if seen_def and line.split("#", 1)[0].rstrip().endswith(":"):
            break
    return out


def replace_call(line: str, name: str, new: str) -> str:
    """``flashinfer.fp4_quantize(`` -> ``new(`` in a caller's line of code."""
    return re.sub(r"[\w.]*\b" + re.escape(name) + r"\(", lambda _m: new + "(", line, count=1)


def bound(sig: inspect.Signature, args: tuple, kwargs: dict) -> dict:
    try:
        return dict(sig.bind(*args, **kwargs).arguments)
    except TypeError:
        return {}



def has_fake_tensor(value: Any) -> bool:
    """Does ``value`` (or a list, tuple or dict in it) hold a FakeTensor?"""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, (list, tuple)):
        return any(has_fake_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(has_fake_tensor(v) for v in value.values())
    return isinstance(value, FakeTensor)


def break_site(brk: Break) -> str:
    return at(brk.site)

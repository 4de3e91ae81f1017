"""Every process-global change the doctor makes, and its undo.

Emulating a GPU, listening to Dynamo's logs, making a target importable and
applying a fix all change state that outlives a function call: module
attributes, dict entries, environment variables, ``sys.path``, logger
configuration, Dynamo's skip list and hooks, temporary torch ops. Each change
goes through an :class:`UndoLog`, which records how to revert it; ``undo()``
reverts everything last-first, so nested logs and repeated patches of the
same attribute restore the outermost original.

:class:`PatchSet` is an undo log used as a context manager by the fix ladder:
it adds ``rebind`` (point every module-level reference to a function at a
replacement) and ``custom_op`` (a temporary ``torch.library`` op).

What a PatchSet cannot reach, and so never patches: references held in
closures, default arguments, instance or class attributes. A caller that
stores ``self.quantize = flashinfer.fp4_quantize`` keeps the original.
Nothing here writes to disk.
"""

from __future__ import annotations

import logging
import os
import sys
import types
import warnings
from typing import Any, Callable, Iterable

_MISSING = object()

# Namespace of the temporary ops a PatchSet registers.
OP_NAMESPACE = "graphbreak_doctor_fix"

# Modules whose globals never hold a target's functions; skipping them keeps
# the reference scan cheap (a few thousand modules otherwise).
_SKIP_PREFIXES = ("torch", "graphbreak_doctor", "_pytest", "pytest", "sympy", "numpy", "jinja2", "networkx")


class UndoLog:
    """Records changes to process-global state; :meth:`undo` reverts them."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], None]] = []
        self.patched: list[tuple[Any, str]] = []  # (owner, attribute), for tests

    # ------------------------------------------------------------ primitives

    def setattr(self, owner: Any, name: str, value: Any) -> None:
        # Only the owner's own entry counts: an inherited or absent attribute is
        # restored by deleting ours, not by pinning a copy on the owner.
        old = vars(owner).get(name, _MISSING)

        def restore() -> None:
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)

        setattr(owner, name, value)
        self._steps.append(restore)
        self.patched.append((owner, name))

    def set_option(self, config: Any, name: str, value: Any) -> None:
        """An option of a torch config module (``torch._dynamo.config``): its
        values live behind the module's own attribute access, not in vars()."""
        old = getattr(config, name)
        setattr(config, name, value)
        self._steps.append(lambda: setattr(config, name, old))
        self.patched.append((config, name))

    def keep_config(self, config: Any) -> None:
        """Whatever code changes in a torch config module (``torch._dynamo.config``)
        after this call -- code the doctor does not own, such as a framework's
        own compile settings -- is put back on undo."""
        saved = config.get_config_copy()

        def restore() -> None:
            # Loading every option back sets deprecated ones too, which warn.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                config.load_config(saved)

        self._steps.append(restore)

    def setitem(self, mapping: Any, key: Any, value: Any) -> None:
        old = mapping.get(key, _MISSING)

        def restore() -> None:
            if old is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = old

        mapping[key] = value
        self._steps.append(restore)

    def setenv(self, name: str, value: str | None) -> None:
        old = os.environ.get(name)

        def restore() -> None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old

        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
        self._steps.append(restore)

    def call_on_undo(self, fn: Callable[[], None]) -> None:
        self._steps.append(fn)

    def replace_code(self, fn: Any, body: types.CodeType) -> None:
        """Run ``body`` when ``fn`` is called; ``fn``'s identity, name, file
        and first line stay (so do its globals and closure: ``body`` must have
        the same free variables)."""
        code = fn.__code__
        if code.co_freevars != body.co_freevars:
            raise ValueError(f"{fn.__qualname__}: the replacement body has other free variables")
        keep = {"co_filename": code.co_filename, "co_name": code.co_name, "co_firstlineno": code.co_firstlineno}
        if hasattr(code, "co_qualname"):
            keep["co_qualname"] = code.co_qualname
        fn.__code__ = body.replace(**keep)

        def restore() -> None:
            fn.__code__ = code

        self._steps.append(restore)

    def enter(self, manager: Any) -> Any:
        """Enter a context manager now and exit it on undo; returns what it gives."""
        value = manager.__enter__()
        self._steps.append(lambda: manager.__exit__(None, None, None))
        return value

    # ------------------------------------------------------- common changes

    def prepend_sys_path(self, entry: str) -> None:
        """Put ``entry`` first on ``sys.path`` unless it is already there."""
        if entry in sys.path:
            return
        sys.path.insert(0, entry)
        self._steps.append(lambda: sys.path.remove(entry) if entry in sys.path else None)

    def configure_logger(self, logger: logging.Logger, *, level: int | None = None,
                         propagate: bool | None = None, handlers: list[logging.Handler] | None = None) -> None:
        """Change a logger's level, propagation or handler list."""
        saved = (logger.level, logger.propagate, list(logger.handlers))

        def restore() -> None:
            logger.setLevel(saved[0])
            logger.propagate = saved[1]
            logger.handlers = saved[2]

        if level is not None:
            logger.setLevel(level)
        if propagate is not None:
            logger.propagate = propagate
        if handlers is not None:
            logger.handlers = list(handlers)
        self._steps.append(restore)

    def dynamo_skip(self, module_name: str) -> None:
        """Put a package's folder on Dynamo's skip list (its frames are never
        traced) while this log is open (torch/_dynamo/trace_rules.py ``add``
        appends to ``SKIP_DIRS`` and recompiles the matcher)."""
        from torch._dynamo import trace_rules

        before = list(trace_rules.SKIP_DIRS)
        trace_rules.add(module_name)
        added = [d for d in trace_rules.SKIP_DIRS[len(before):]]

        def restore() -> None:
            for d in added:
                if d in trace_rules.SKIP_DIRS:
                    trace_rules.SKIP_DIRS.remove(d)
            trace_rules._recompile_re()

        self._steps.append(restore)

    def keep_torch_state(self) -> None:
        """Whatever a target does to torch's global settings -- default dtype
        and device, grad mode, deterministic algorithms, anomaly detection --
        is put back on undo."""
        import torch

        dtype = torch.get_default_dtype()
        grad = torch.is_grad_enabled()
        deterministic = torch.are_deterministic_algorithms_enabled()
        warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        anomaly = torch.is_anomaly_enabled()
        anomaly_check_nan = torch.is_anomaly_check_nan_enabled()
        device = torch.get_default_device()

        def restore() -> None:
            torch.set_default_dtype(dtype)
            torch.set_grad_enabled(grad)
            torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
            torch.set_anomaly_enabled(anomaly, anomaly_check_nan)
            torch.set_default_device(None if device == torch.device("cpu") else device)

        self._steps.append(restore)
        # A target that rebinds torch.cuda's functions (torch.cuda.is_available
        # = lambda: True) gets them put back too.
        self.keep_callables("torch.cuda")
        self.keep_attribute(torch, "cuda")

    def keep_attribute(self, owner: Any, name: str) -> None:
        """Whatever ``owner.name`` is rebound to after this call is put back on undo."""
        old = vars(owner).get(name, _MISSING)

        def restore() -> None:
            if old is not _MISSING and vars(owner).get(name, _MISSING) is not old:
                setattr(owner, name, old)

        self._steps.append(restore)

    def keep_callables(self, package: str) -> None:
        """Whatever is done after this call to the functions and classes that
        the module ``package`` and its loaded submodules hold -- one rebound
        (``torch.cuda.is_available = lambda: True``), deleted, or a function
        added -- is put back on undo. Values that are not callable (a
        module's own state: ``torch.cuda._initialized``, its generators) and
        submodules imported meanwhile are left as they are."""
        def callable_entries(module: types.ModuleType) -> dict[str, Any]:
            return {k: v for k, v in vars(module).items()
                    if callable(v) and not isinstance(v, types.ModuleType)}

        saved = {name: (module, callable_entries(module)) for name, module in list(sys.modules.items())
                 if isinstance(module, types.ModuleType) and (name == package or name.startswith(package + "."))}

        def restore() -> None:
            for module, before in saved.values():
                now = vars(module)
                for name, value in before.items():
                    if now.get(name, _MISSING) is not value:
                        setattr(module, name, value)
                for name in [n for n, v in now.items() if n not in before and callable(v)
                             and not isinstance(v, types.ModuleType)]:
                    delattr(module, name)

        self._steps.append(restore)

    def keep_environment(self) -> None:
        """Whatever is set in or removed from ``os.environ`` after this call
        (a framework's import sets its defaults) is put back on undo."""
        saved = dict(os.environ)

        def restore() -> None:
            for name in set(os.environ) - set(saved):
                del os.environ[name]
            for name, value in saved.items():
                if os.environ.get(name) != value:
                    os.environ[name] = value

        self._steps.append(restore)

    def bytecode_hook(self, hook: Callable[..., Any]) -> None:
        """Register a Dynamo bytecode hook (sees each frame's generated code)."""
        import torch._dynamo.convert_frame

        handle = torch._dynamo.convert_frame.register_bytecode_hook(hook)
        self._steps.append(handle.remove)

    # -------------------------------------------------------------- undoing

    def undo(self) -> None:
        errors: list[BaseException] = []
        while self._steps:
            step = self._steps.pop()
            try:
                step()
            except BaseException as e:  # keep undoing; the first failure is raised below
                errors.append(e)
        self.patched.clear()
        if errors:
            raise errors[0]

    def __enter__(self) -> UndoLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.undo()


def references(obj: Any, *, exclude: Iterable[str] = (), within: Iterable[str] = ()) -> list[tuple[types.ModuleType, str]]:
    """(module, name) of every module global that is ``obj`` itself;
    ``within``: package prefixes scanned although the scan skips them (a
    function of torch's own, exported by its package)."""
    excluded = set(exclude)
    scanned = tuple(within)
    found = []
    for mod_name, module in list(sys.modules.items()):
        skipped = mod_name.startswith(_SKIP_PREFIXES) and not (scanned and mod_name.startswith(scanned))
        if module is None or mod_name in excluded or skipped:
            continue
        try:
            items = list(vars(module).items())
        except TypeError:  # a module object without a __dict__
            continue
        for name, value in items:
            if value is obj:
                found.append((module, name))
    found.sort(key=lambda mn: (mn[0].__name__, mn[1]))
    return found


class PatchSet(UndoLog):
    """One fix's patches, undone on exit (or by :meth:`undo`).

    ``rebind`` reaches every module-level reference to a function
    (``flashinfer.fp4_quantize`` is also ``flashinfer.quantization.fp4_quantize``
    and ``flashinfer.quantization.fp4_quantization.fp4_quantize``; a caller that
    did ``from flashinfer import fp4_quantize`` holds a fourth)."""

    def __init__(self, label: str = "") -> None:
        super().__init__()
        self.label = label
        self.rebound: list[str] = []  # "module.name" entries, for the rung's detail
        self.ops: list[str] = []  # qualified names of temporary ops

    def rebind(self, original: Any, replacement: Any, *, exclude: Iterable[str] = (),
               within: Iterable[str] = ()) -> list[str]:
        """Point every module-level reference to ``original`` at ``replacement``
        (``within``: see :func:`references`)."""
        names = []
        for module, name in references(original, exclude=exclude, within=within):
            self.setattr(module, name, replacement)
            names.append(f"{module.__name__}.{name}")
        self.rebound.extend(names)
        return names

    def custom_op(self, name: str, impl: Callable, *, schema: str, fake: Callable) -> Any:
        """Register ``graphbreak_doctor_fix::name`` for the life of this PatchSet."""
        import torch

        qualname = f"{OP_NAMESPACE}::{name}"
        op = torch.library.custom_op(qualname, impl, mutates_args=(), schema=schema)
        op.register_fake(fake)
        self.ops.append(qualname)
        self.call_on_undo(lambda: _unregister(qualname))
        return getattr(getattr(torch.ops, OP_NAMESPACE), name)

    def __enter__(self) -> PatchSet:
        return self


def _unregister(qualname: str) -> None:
    """Remove a temporary custom op from the dispatcher and torch.ops.

    torch/_library/custom_ops.py keeps one Library per op in OPDEF_TO_LIB and
    the CustomOpDef in OPDEFS; Library._destroy deregisters the schema and
    kernels and drops the cached torch.ops entry. Private API: if a future
    torch renames it, the op is left registered (harmless: nothing outside
    this package calls the graphbreak_doctor_fix namespace)."""
    from torch._library import custom_ops

    lib = getattr(custom_ops, "OPDEF_TO_LIB", {}).pop(qualname, None)
    if lib is not None:
        lib._destroy()
    getattr(custom_ops, "OPDEFS", {}).pop(qualname, None)

"""graphbreak_doctor_patch: changes graphbreak-doctor's fix ladder proved,
made again at import, in any Python process that imports this package.

This file is copied as it is into a written patch (``fix --write-patch DIR``
writes it to ``DIR/graphbreak_doctor_patch/__init__.py``); it uses the
standard library only and never imports graphbreak_doctor. ``manifest.json``
beside it lists, per module to patch, the block of source to run in that
module's namespace right after the module is imported (``blocks/``), the
SHA-256 of the module's file the blocks were proven against, and the
distributions' versions the patch was proven on.

Importing the package:
- checks every distribution's installed version against the manifest; one
  differs: one line on stderr naming both versions, and nothing is patched;
- patches each listed module already imported, and every other one when it
  is imported (a finder on ``sys.meta_path``); a module whose file is not the
  one the patch was proven on is left alone, with one line on stderr;
- after a block replaced a function, points every module global that still
  refers to the old one at the new one.
Importing it again does nothing (idempotent). ``sitecustomize.py`` in DIR
imports it in every process started with ``PYTHONPATH=DIR``.
"""

import hashlib
import importlib.abc
import importlib.metadata
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PREFIX = "graphbreak_doctor_patch: "
# Module name -> its manifest entry, until the module is patched.
_PENDING = {}
STATE = {"installed": False, "refused": "", "applied": []}


def _say(message):
    sys.stderr.write(_PREFIX + message.replace("\n", " ") + "\n")


def _manifest():
    with open(os.path.join(_HERE, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def _version_mismatch(versions):
    for dist, proven in sorted(versions.items()):
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            installed = "(not installed)"
        if installed != proven:
            return (f"proven on {dist} {proven}, but {dist} {installed} is installed: "
                    "nothing is patched, the process goes on unpatched")
    return ""


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _rebind(old, new):
    """Every module global that refers to ``old`` refers to ``new``."""
    for name, module in list(sys.modules.items()):
        if name.startswith(("torch", "graphbreak_doctor_patch")):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if value is old:
                namespace[key] = new


def _apply(module):
    entry = _PENDING.pop(module.__name__, None)
    if entry is None or module.__dict__.get("__graphbreak_doctor_patch__"):
        return
    file = getattr(module, "__file__", None) or ""
    try:
        same = _digest(file) == entry["sha256"]
    except OSError as e:
        _say(f"{module.__name__} not patched: its file cannot be read ({e})")
        return
    if not same:
        _say(f"{module.__name__} not patched: {file} is not the file the patch was proven on")
        return
    before = {name: module.__dict__.get(name) for name in entry["functions"]}
    path = os.path.join(_HERE, entry["block"])
    try:
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
        exec(code, module.__dict__)
    except Exception as e:  # the library keeps working unpatched; say why once
        _say(f"{module.__name__} not patched: {type(e).__name__}: {e}")
        return
    module.__dict__["__graphbreak_doctor_patch__"] = True
    STATE["applied"].append(module.__name__)
    for name, old in before.items():
        new = module.__dict__.get(name)
        if old is not None and new is not old:
            _rebind(old, new)


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the patch."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _apply(module)

    def __getattr__(self, name):  # get_source, get_filename, ... of the real loader
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _PENDING:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def install():
    """Check the versions and patch (now, or when each module is imported)."""
    if STATE["installed"]:
        return
    STATE["installed"] = True
    manifest = _manifest()
    refused = _version_mismatch(manifest.get("versions", {}))
    if refused:
        STATE["refused"] = refused
        _say(refused)
        return
    _PENDING.update(manifest.get("modules", {}))
    for name in list(_PENDING):
        if name in sys.modules:
            _apply(sys.modules[name])
    if _PENDING:
        sys.meta_path.insert(0, _Finder())


def chain_sitecustomize(here):
    """Run the ``sitecustomize`` this folder's one hides (the environment's own)."""
    import importlib.machinery
    import importlib.util

    folder = os.path.realpath(os.path.dirname(here))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != folder]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


# The doctor's own copy of this file (no manifest beside it) patches nothing.
if os.path.isfile(os.path.join(_HERE, "manifest.json")):
    install()

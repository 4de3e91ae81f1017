"""graphbreak_doctor_patch: changes graphbreak-doctor's fix ladder proved,
made again at import, in any Python process that imports this package.

This file is copied as it is into a written patch (``fix --write-patch DIR``
writes it to ``DIR/graphbreak_doctor_patch/__init__.py``); it uses the
standard library only and never imports graphbreak_doctor. ``manifest.json``
beside it lists, per module to patch, the block of source to run in that
module's namespace right after the module is imported (``blocks/``) with the
block's SHA-256, the SHA-256 of the module's file the blocks were proven
against, the distribution the module belongs to, and the distributions'
versions the patch was proven on.

Importing the package first reads and checks everything (``check_manifest``),
and runs nothing unless every check holds; otherwise one line on stderr, and
the process goes on unpatched:
- no other patch folder is on ``sys.path`` (two would hide each other);
- ``manifest.json`` reads as the doctor writes it: every field of its type;
- every distribution's installed version is the one the patch was proven on
  (the line names both versions);
- every module is one the patch was proven on: its ``file`` is the module's
  own path, and it is a file of its distribution (its RECORD lists it), or,
  for code of no distribution, neither a standard-library module nor one an
  installed distribution holds;
- every block is a ``.py`` file of this package's ``blocks/`` folder (no
  absolute or ``..`` path, no symlink out) whose SHA-256 is the recorded one;
  the checked text is what runs.
Then it patches each listed module already imported, and every other one
when it is imported (a finder on ``sys.meta_path``); a module whose file is
not the one the patch was proven on is left alone, with one line on stderr; a
block that raises (``SystemExit`` too) is one line, and the module keeps its
namespace as it was; after a block replaced a function, every module global
that still refers to the old one points at the new one.
Importing it again does nothing (idempotent). ``sitecustomize.py`` in DIR
imports it in every process started with ``PYTHONPATH=DIR``.
"""

import hashlib
import importlib.abc
import importlib.metadata
import json
import os
import stat
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = "graphbreak_doctor_patch"
_PREFIX = _PACKAGE + ": "
_UNPATCHED = ": nothing is patched, the process goes on unpatched"
# Module name -> its checked entry (with the block's text), until the module is patched.
_PENDING = {}
STATE = {"installed": False, "refused": "", "applied": []}


def _say(message):
    """One line on stderr: every character that is not printable (a newline,
    an escape sequence from a tampered manifest) shown as its escape."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(message))
    sys.stderr.write(_PREFIX + shown + "\n")


class Refused(Exception):
    """The patch folder, its manifest or a block is not what the doctor
    wrote, or the environment is not the one it was proven on: one line, and
    nothing runs."""


# ----------------------------------------------------------------- the checks

def _regular_file(path):
    """A regular file, not reached through a link (a FIFO would block the
    process that loads the patch)."""
    try:
        return not os.path.islink(path) and stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _is_sha256(value):
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _is_dotted(name):
    return isinstance(name, str) and bool(name) and all(part.isidentifier() for part in name.split("."))


def _other_patch_folders(here):
    """Folders on sys.path, besides this package's own, that hold a patch."""
    mine = os.path.realpath(os.path.dirname(here))
    found = []
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        folder = os.path.realpath(entry or os.curdir)
        if folder != mine and folder not in found and os.path.isfile(os.path.join(folder, _PACKAGE, "manifest.json")):
            found.append(folder)
    return found


def _version_mismatch(versions):
    for dist, proven in sorted(versions.items()):
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            installed = "(not installed)"
        if installed != proven:
            return f"proven on {dist} {proven}, but {dist} {installed} is installed"
    return ""


def in_distribution(module, file, dist):
    """Is ``file`` (``module``'s path from its import root) one of ``dist``'s?"""
    files = importlib.metadata.distribution(dist).files or []
    if any(f.as_posix() == file for f in files):
        return True
    # An editable install lists none of its package's files: the package
    # must be one the distribution names as its own.
    top = module.split(".")[0]
    if any(f.as_posix().startswith(top + "/") for f in files):
        return False
    return top in (importlib.metadata.distribution(dist).read_text("top_level.txt") or "").split()


_INSTALLED = []


def _installed_packages():
    """Top-level package -> the installed distributions that hold it (read once)."""
    if not _INSTALLED:
        _INSTALLED.append(importlib.metadata.packages_distributions())
    return _INSTALLED[0]


def _checked_block(name, entry, here):
    block = entry.get("block")
    blocks = os.path.join(here, "blocks")
    path = os.path.join(here, block) if isinstance(block, str) else ""
    if (not isinstance(block, str) or os.path.isabs(block) or ".." in block.replace("\\", "/").split("/")
            or not block.endswith(".py") or os.path.islink(blocks) or os.path.islink(path)
            or os.path.dirname(os.path.normpath(path)) != os.path.normpath(blocks) or not _regular_file(path)):
        raise Refused(f"module {name}: its block {block!r} is not a file of the patch's blocks/ folder")
    if not _is_sha256(entry.get("block_sha256")):
        raise Refused(f"module {name}: its block has no SHA-256 (a patch written by an earlier graphbreak-doctor: "
                      "write it again)")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Refused(f"module {name}: its block {block} cannot be read ({e.strerror or e})") from e
    if hashlib.sha256(data).hexdigest() != entry["block_sha256"]:
        raise Refused(f"module {name}: its block {block} is not the one written (its SHA-256 differs)")
    try:
        return path, data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refused(f"module {name}: its block {block} is not UTF-8 text") from e


def _checked_module(name, entry, versions, here):
    if not _is_dotted(name) or name.split(".")[0] in (_PACKAGE, "sitecustomize"):
        raise Refused(f"manifest.json names {name!r}, which is not a module the patch can be for")
    if not isinstance(entry, dict):
        raise Refused(f"manifest.json: module {name} is not an object")
    if "distribution" not in entry:
        raise Refused(f"module {name}: no distribution recorded (a patch written by an earlier graphbreak-doctor: "
                      "write it again)")
    file, dist = entry.get("file"), entry["distribution"]
    own = name.replace(".", "/")
    if file not in (own + ".py", own + "/__init__.py"):
        raise Refused(f"module {name}: its file {file!r} is not the module's own path")
    if not _is_sha256(entry.get("sha256")):
        raise Refused(f"module {name}: its file's SHA-256 is missing or malformed")
    functions = entry.get("functions")
    if not isinstance(functions, list) or not functions or not all(
            isinstance(f, str) and f.isidentifier() for f in functions):
        raise Refused(f"module {name}: its functions are not a list of names")
    if dist is None:  # code of no distribution (a project's own): not the standard library's, nor a library's
        top = name.split(".")[0]
        if top in getattr(sys, "stdlib_module_names", ()) or top in sys.builtin_module_names:
            raise Refused(f"module {name} is the standard library's, not a library the patch was proven on")
        owners = _installed_packages().get(top)
        if owners:
            raise Refused(f"module {name} belongs to {', '.join(sorted(set(owners)))}, "
                          "not a library the patch was proven on")
    elif not isinstance(dist, str) or dist not in versions:
        raise Refused(f"module {name}: its distribution {dist!r} is not one the patch was proven on")
    elif not in_distribution(name, file, dist):
        raise Refused(f"module {name}: {file} is not a file of {dist}, the library the patch was proven on")
    path, source = _checked_block(name, entry, here)
    return {"sha256": entry["sha256"], "functions": list(functions), "block": path, "source": source}


def check_manifest(manifest, here):
    """Every module's checked entry (with its block's text), or Refused:
    the manifest's shape, the installed versions, the modules, the blocks."""
    if not isinstance(manifest, dict):
        raise Refused("manifest.json is not a JSON object")
    versions, modules = manifest.get("versions"), manifest.get("modules")
    if not isinstance(versions, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in versions.items()):
        raise Refused("manifest.json: versions is not an object of distribution names and versions")
    if not isinstance(modules, dict) or not modules:
        raise Refused("manifest.json: modules is missing or empty")
    mismatch = _version_mismatch(versions)
    if mismatch:
        raise Refused(mismatch)
    return {name: _checked_module(name, entry, versions, here) for name, entry in modules.items()}


def _writable_by_others(here):
    """The first part of the patch that someone other than its owner can
    write ("" when none): the folder, the one it lies in (unless shared with
    the sticky bit, as /tmp is), the package, its blocks/ and every file.
    The manifest is not signed: whoever can write a block and its recorded
    hash could make this process run anything."""
    folder = os.path.dirname(here)
    parent = os.path.dirname(os.path.abspath(folder))
    parts = [(parent, True), (folder, False), (here, False)]
    for where in (folder, here, os.path.join(here, "blocks")):
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        parts.extend((os.path.join(where, n), False) for n in names if n != "__pycache__")
    for path, shared_ok in parts:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            continue  # refused by the checks that follow where it matters
        if st.st_mode & 0o022 and not (shared_ok and st.st_mode & stat.S_ISVTX):
            who = "every user" if st.st_mode & 0o002 else "its group"
            return f"{path} can be written by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _plan():
    unsafe = _writable_by_others(_HERE)
    if unsafe:
        raise Refused(f"{unsafe}: whoever can write the patch could make this process run anything; "
                      "make it writable by its owner alone (chmod -R go-w)")
    others = _other_patch_folders(_HERE)
    if others:
        raise Refused(f"another patch folder is on sys.path ({others[0]}) besides {os.path.dirname(_HERE)}; "
                      "load one")
    if not _regular_file(os.path.join(_HERE, "manifest.json")):
        raise Refused("manifest.json is missing or not a regular file")
    try:
        with open(os.path.join(_HERE, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except OSError as e:
        raise Refused(f"manifest.json cannot be read ({e.strerror or e})") from e
    except (ValueError, RecursionError) as e:
        raise Refused(f"manifest.json is not JSON ({e})") from e
    return check_manifest(manifest, _HERE)


# ------------------------------------------------------------------ patching

def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _rebind(old, new):
    """Every module global that refers to ``old`` refers to ``new``."""
    for name, module in list(sys.modules.items()):
        if name.startswith(("torch", _PACKAGE)):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if value is old:
                namespace[key] = new


def _apply(module):
    """Patch ``module`` if it is pending; any failure is one line, never the
    library's own import failing."""
    try:
        _patch(module)
    except Exception as e:
        _say(f"{getattr(module, '__name__', module)} not patched: {type(e).__name__}: {e}")


def _patch(module):
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
    saved = dict(module.__dict__)
    try:
        exec(compile(entry["source"], entry["block"], "exec"), module.__dict__)
    except (Exception, SystemExit) as e:  # the library keeps working unpatched; say why once
        module.__dict__.clear()
        module.__dict__.update(saved)
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
    """Check everything, then patch (now, or when each module is imported).
    Inert on any bad input: one line on stderr, nothing patched."""
    if STATE["installed"]:
        return
    STATE["installed"] = True
    try:
        plan = _plan()
    except Refused as e:
        STATE["refused"] = str(e)
        _say(str(e) + _UNPATCHED)
        return
    except Exception as e:  # a check that broke on input it did not foresee: still nothing runs
        STATE["refused"] = f"{type(e).__name__}: {e}"
        _say(f"the patch cannot be checked ({type(e).__name__}: {e})" + _UNPATCHED)
        return
    _PENDING.update(plan)
    for name in list(_PENDING):
        if name in sys.modules:
            _apply(sys.modules[name])
    if _PENDING:
        sys.meta_path.insert(0, _Finder())


# Imported as the written package: check, then patch. The doctor's own copy
# of this file (graphbreak_doctor.fix.patch_runtime) patches nothing.
if __name__ == _PACKAGE:
    install()

"""What a worker's job read: the inputs the findings cache keys on
(jobs/findings_cache.py; docs/cache.md says what is recorded and what is not).

``start_recording()`` runs first thing in the worker: an audit hook
(``sys.addaudithook``, which cannot be removed: the worker's process ends with
its job) notes every file opened for reading and every folder listed
(``os.listdir``, ``os.scandir``, ``glob.glob``). ``manifest()`` runs in the
job's process after the job: those paths, every imported module's file, the
folders FlashInfer and the emulation probe with ``os.stat`` (which raises no
audit event), the folder of a written patch, and the dist-info METADATA files
and versions of the distributions the job imported -- each file with its
size, times and sha256, each folder with a hash of its sorted names. The
same functions compare a recorded manifest with the files as they are now
(``changed``), so recording and checking cannot disagree.

What a job reads outside its own process is keyed on what can be known of
it: a child process (``subprocess``, ``os.posix_spawn``, ``os.exec*``) by
its executable's content, its arguments and every file or folder its
arguments name; a program looked for on PATH and not found, by its absence.
An executable in the run's own folder was written during the run by code
whose files are recorded (the emulated CUDA toolkit): it is keyed by those
and its content is noted. The environment variables the job read
(``os.environ``, ``os.getenv``) are recorded with their values. A command
run through a shell (``os.system``, ``shell=True``) cannot be known: the
manifest says so (``unknown``) and the job is not kept.

Standard library only: the doctor's parent process checks a manifest without
importing torch.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import stat
import sys
import tempfile
from typing import Any

from graphbreak_doctor.cache import OFF_ENV
from graphbreak_doctor.jobs import hash_memo, process_inputs
from graphbreak_doctor.patching import UndoLog

# Files larger than this are not hashed: they are the same when their size
# and modification time are (docs/cache.md).
HASH_LIMIT = 64 << 20
# Per-process contents, never the same twice: not inputs.
_NOT_FILES = ("/proc/", "/sys/", "/dev/")
# Names in one listing, at most (a larger folder is hashed on its first ones
# and its count).
_LISTING_LIMIT = 100_000

def cache_is_off() -> bool:
    return os.environ.get(OFF_ENV, "") not in ("", "0")


_opened: set[str] = set()
_listed: set[str] = set()
# Folders the import system listed to find modules, or importlib.metadata to
# find distributions: only the names that can be those count there, so a
# report written to the current folder (on the import path under
# ``python -m``) is not a change.
_searched: set[str] = set()
_IMPORTERS = ("<frozen importlib._bootstrap_external>", os.path.dirname(importlib.__file__) + os.sep)
_skip: list[str] = []
_recording: list[bool] = []  # [True] while recording (manifest() stops it)
_unnamed: list[str] = []  # relative paths read while the current folder was gone
# Child processes (process_inputs.describe_child; "own": the sha256 of an executable in the run's own folder), and
# why the job's inputs cannot all be known.
_children: list[dict[str, Any]] = []
_unknown: list[str] = []
_in_hook: list[bool] = []
_undo = UndoLog()  # the recording os.environ, put back when the manifest is made


def _absolute(path: Any) -> str:
    """An absolute path for an audited argument ("" for a file descriptor or
    anything that is not a path)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    elif isinstance(path, os.PathLike):
        path = os.fspath(path)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
    if not isinstance(path, str) or not path or "\x00" in path:
        return ""
    if os.path.isabs(path):
        return os.path.normpath(path)
    try:
        here = os.getcwd()
    except OSError:  # the current folder is gone: the input cannot be named, so the job is not kept
        _unnamed.append(path)
        return ""
    return os.path.normpath(os.path.join(here, path))


def _kept(path: str) -> bool:
    if not path or path.startswith(_NOT_FILES) or path.endswith(".pyc"):
        return False  # a .pyc is its source's, which is recorded
    return not any(path == s or path.startswith(s + os.sep) for s in _skip)


def _hook(event: str, args: tuple) -> None:
    if not _recording or _in_hook:
        return
    _in_hook.append(True)
    try:
        _note(event, args)
    finally:
        _in_hook.pop()


def _note(event: str, args: tuple) -> None:
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn"):
        if event == "os.spawn":
            args = args[1:]  # (mode, path, args, env)
        executable, argv = args[0] if args else None, args[1] if len(args) > 1 else None
        cwd = args[2] if event == "subprocess.Popen" and len(args) > 2 else None
        env = args[3] if event == "subprocess.Popen" and len(args) > 3 else args[2] if len(args) > 2 else None
        _child(executable, argv, cwd, env)
    elif event == "os.system":
        _unknown.append("a command ran through a shell (os.system): what it reads cannot be known")
    elif event == "open":
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        if flags & os.O_ACCMODE == os.O_RDONLY and not flags & os.O_CREAT:
            path = _absolute(args[0])
            if _kept(path):
                _opened.add(path)
    elif event in ("os.listdir", "os.scandir"):
        path = _absolute("." if args and args[0] is None else args[0] if args else "")
        if _kept(path):
            try:
                caller = sys._getframe(2).f_code.co_filename  # past _hook
            except ValueError:  # listed from C code, with no Python frame above the hook
                caller = ""
            (_searched if caller.startswith(_IMPORTERS) else _listed).add(path)
    elif event == "glob.glob" and args and isinstance(args[0], (str, bytes)):
        # The folder the pattern starts in (what it lists below is listed
        # through os.scandir, recorded above).
        pattern = os.fsdecode(args[0])
        head = pattern.split("*")[0].split("?")[0].split("[")[0]
        path = _absolute(os.path.dirname(head) or ".")
        if _kept(path):
            _listed.add(path)


def _child(executable: Any, argv: Any, cwd: Any, env: Any) -> None:
    """Note a child process: its executable and the paths its arguments name."""
    try:
        child, named = process_inputs.describe_child(executable, argv, cwd, env)
    except process_inputs.Unknowable as e:
        _unknown.append(str(e))
        return
    found = child["executable"]
    if found and not _kept(found):  # written during the run (the emulated toolkit): its content, noted
        child["own"] = _sha256(found, HASH_LIMIT) if os.path.isfile(found) else "absent"
    elif found:
        _opened.add(found)
    _children.append(child)
    for path in filter(_kept, named):
        (_opened if os.path.isfile(path) else _listed).add(path)


def start_recording(skip: tuple[str, ...] = ()) -> None:
    """Record what this process (and a process forked from it) opens for
    reading and lists, from now on; paths in ``skip`` (the worker's own
    folder) and the temporary folder are left out: they are the run's own."""
    if cache_is_off():
        return
    _skip.extend(os.path.normpath(os.path.abspath(s)) for s in (*skip, tempfile.gettempdir()) if s)
    process_inputs.record_environment(_undo)
    _recording[:] = [True]
    sys.addaudithook(_hook)
    # The folders the import system listed before this (their finders are cached).
    for folder in list(sys.path_importer_cache):
        path = _absolute(folder)
        if _kept(path) and os.path.isdir(path):
            _searched.add(path)


# -- identities of files and folders ------------------------------------------

def file_identity(path: str, known: list | None = None) -> list:
    """[size, mtime_ns, ctime_ns, sha256] of a regular file; ["absent"] when
    there is none, ["other"] when it is not a regular file; the sha256 is ""
    past HASH_LIMIT. With ``known`` (a recorded identity) the file is hashed
    only if its stat differs from it."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ["absent"]
    if not stat.S_ISREG(st.st_mode):
        return ["other"]
    head = [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    if known is not None and len(known) == 4 and known[:3] == head:
        return known
    if st.st_size > HASH_LIMIT:
        return [*head, ""]
    return [*head, _sha256(path, st.st_size)]


def _sha256(path: str, size: int) -> str:
    digest = hashlib.sha256()
    try:
        # Non-blocking: a FIFO put where a file was must not hang the check.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return "unreadable"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "unreadable"
        left = min(size, HASH_LIMIT) + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
    except OSError:
        return "unreadable"
    finally:
        os.close(fd)
    return digest.hexdigest()


def same_file(recorded: list, now: list) -> bool:
    """Whether a file is unchanged: its content when hashed (a touched file
    with the same bytes is the same), else its size and modification time."""
    if recorded[:1] in (["absent"], ["other"]) or now[:1] in (["absent"], ["other"]):
        return recorded[:1] == now[:1]
    if len(recorded) != 4 or len(now) != 4:
        return False
    if recorded[3] and now[3]:
        return recorded[0] == now[0] and recorded[3] == now[3]
    return recorded[:2] == now[:2] and recorded[3] == now[3]


def _module_name(folder: str, name: str) -> bool:
    """Whether a folder entry is something to import or a distribution's
    metadata: a package (a folder with an ``__init__.py``), a source or
    extension module, a .pth file, a .dist-info or .egg-info folder. (A
    folder without ``__init__.py`` is at most a namespace package, which
    never hides a module or package of the same name.)"""
    import importlib.machinery

    if "." not in name:
        return os.path.isfile(os.path.join(folder, name, "__init__.py"))
    return name.endswith((*importlib.machinery.all_suffixes(), ".pth", ".dist-info", ".egg-info", ".egg-link",
                          ".egg"))


def listing_identity(path: str, known: list | None = None, modules_only: bool = False) -> list:
    """[mtime_ns, ctime_ns, sha256 of the sorted names] of a folder (with
    ``modules_only``, of the names that can be imported); ["absent"] when
    there is none, ["other"] when it is not a folder. With ``known``, the
    folder is listed only if its stat differs from it."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ["absent"]
    if not stat.S_ISDIR(st.st_mode):
        return ["other"]
    head = [st.st_mtime_ns, st.st_ctime_ns]
    if known is not None and len(known) == 3 and known[:2] == head:
        return known
    try:
        names = sorted(n for n in os.listdir(path) if not modules_only or _module_name(path, n))
    except OSError:
        return [*head, "unreadable"]
    digest = hashlib.sha256(f"{len(names)}\n".encode())
    for name in names[:_LISTING_LIMIT]:
        digest.update(os.fsencode(name) + b"\n")
    return [*head, digest.hexdigest()]


def same_listing(recorded: list, now: list) -> bool:
    if len(recorded) == 3 and len(now) == 3:
        return recorded[2] == now[2]
    return recorded[:1] == now[:1]


# -- the manifest --------------------------------------------------------------

def probed_folders(job_path: str = "") -> list[str]:
    """The folders looked into with os.stat alone (no audit event): FlashInfer's
    AOT and cubin folders and JIT cache, the doctor's host builds, and a
    written patch's folder (``job_path``); each with its sub-folders."""
    roots = [job_path] if job_path else []
    env = sys.modules.get("flashinfer.jit.env")
    if env is not None:
        for name in ("FLASHINFER_AOT_DIRS", "FLASHINFER_CUBIN_DIR", "FLASHINFER_CACHE_DIR"):
            value = getattr(env, name, None)
            roots.extend(str(v) for v in (value if isinstance(value, (tuple, list)) else [value]) if v)
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")
    roots.append(os.path.join(base, ".cache", "flashinfer"))
    if os.environ.get("FLASHINFER_CUBIN_DIR"):
        roots.append(os.environ["FLASHINFER_CUBIN_DIR"])
    from graphbreak_doctor.cache import cache_root

    roots.append(str(cache_root() / "host-build"))
    folders = []
    for root in dict.fromkeys(os.path.normpath(os.path.abspath(r)) for r in roots):
        if not _kept(root):
            continue
        folders.append(root)
        try:
            folders.extend(e.path for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
        except OSError:
            pass  # absent or unreadable: recorded as such by listing_identity
    return folders


def _distributions(modules: set[str]) -> tuple[dict[str, str], list[str]]:
    """Versions of the distributions that own the imported top-level
    modules, and their METADATA files."""
    import importlib.metadata

    owners = importlib.metadata.packages_distributions()
    names = sorted({d for m in modules for d in owners.get(m, ())})
    versions, files = {}, []
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        versions[name] = dist.version or ""
        folder = getattr(dist, "_path", None)
        if folder is not None:
            files.append(os.path.join(str(folder), "METADATA"))
    return versions, files


def manifest(job_path: str = "") -> dict[str, Any]:
    """Every input of this process's job so far (see the module's docstring):
    {"files": {path: identity}, "listings": {path: identity},
    "searched": {path: identity of the importable names},
    "versions": {"python": ..., distribution: version}}."""
    import platform

    _recording.clear()  # what follows reads files for the manifest, not for the job
    _undo.undo()
    if _unnamed:
        raise ValueError(f"{_unnamed[0]!r} was read while the current folder did not exist")
    files, listings, searched = set(_opened), set(_listed), set(_searched)
    modules = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.isabs(path):
            files.add(os.path.normpath(path))
            modules.add(name.partition(".")[0])
    versions, metadata = _distributions(modules)
    files.update(metadata)
    files.add(os.path.realpath(sys.executable))
    files = {f for f in files if _kept(f)}
    listings |= set(probed_folders(job_path))
    known = hash_memo.load()
    identities = {f: file_identity(f, known.get(f)) for f in sorted(files)}
    try:
        hash_memo.save(identities, known)
    except OSError as e:
        sys.stderr.write(f"graphbreak-doctor: the file-hash memo was not kept ({type(e).__name__}: "
                         f"{ascii(str(e))[:200]}); the next job hashes its files again\n")
    return {
        "files": identities,
        "listings": {d: listing_identity(d) for d in sorted(listings)},
        "searched": {d: listing_identity(d, modules_only=True) for d in sorted(searched - listings)},
        "versions": {"python": platform.python_version(), **versions},
        "environment": process_inputs.environment_read(),
        "children": list(_children),
        "unknown": _unknown[0] if _unknown else "",
    }


def changed(recorded: dict[str, Any], limit: int = 1_000_000) -> str:
    """The first recorded input that is not as it was ("" when none is), as a
    phrase; ``recorded`` is a manifest (from an untrusted file: checked)."""
    files, listings, searched, versions = (recorded.get(k) for k in ("files", "listings", "searched", "versions"))
    if not all(isinstance(part, dict) for part in (files, listings, searched, versions)):
        return "the manifest is not whole"
    if len(files) + len(listings) + len(searched) > limit:
        return "the manifest is too long"
    if recorded.get("unknown"):
        return f"its inputs could not all be known: {recorded['unknown']}"
    why = (process_inputs.environment_changed(recorded.get("environment", {}))
           or process_inputs.children_changed(recorded.get("children", [])))
    if why:
        return why
    for path, known in files.items():
        if not isinstance(known, list) or not os.path.isabs(path):
            return "the manifest is not whole"
        if not same_file(known, file_identity(path, known)):
            return f"{path} changed"
    for path, known in listings.items():
        if not isinstance(known, list) or not os.path.isabs(path):
            return "the manifest is not whole"
        if not same_listing(known, listing_identity(path, known)):
            return f"the folder {path} changed"
    for path, known in searched.items():
        if not isinstance(known, list) or not os.path.isabs(path):
            return "the manifest is not whole"
        if not same_listing(known, listing_identity(path, known, modules_only=True)):
            return f"the modules in {path} changed"
    return _versions_changed(versions, files)


def _versions_changed(versions: dict[str, Any], files: dict[str, Any]) -> str:
    """A recorded distribution whose installed METADATA now names another
    version (the file's hash already says it changed; this says how)."""
    for path in files:
        if not path.endswith(os.sep + "METADATA"):
            continue
        name, version = _metadata_version(path)
        if name and name in versions and versions[name] != version:
            return f"{name} is now {version or 'gone'} (was {versions[name]})"
    return ""


def _metadata_version(path: str) -> tuple[str, str]:
    """(Name, Version) from a METADATA file's headers; ("", "") when unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 14).decode("utf-8", "replace")
    except OSError:
        return "", ""
    fields = {}
    for line in head.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields.get("name", ""), fields.get("version", "")


def recorded(job: Any, outcome: Any) -> dict[str, Any] | None:
    """The worker's result's ``inputs``: the manifest of a job that has
    findings (None for one that has none: it is not kept). A manifest that
    cannot be made leaves the job uncached, with one line saying why; with
    the cache turned off (``OFF_ENV``) none is made."""
    if outcome.findings is None or cache_is_off():
        return None
    try:
        return manifest(job.path)
    except Exception as e:  # metadata of an installed package that does not parse, ...
        sys.stderr.write(f"graphbreak-doctor: the findings cache will not keep {job.describe()}: "
                         f"its inputs could not be recorded: {type(e).__name__}: {e}\n")
        return None

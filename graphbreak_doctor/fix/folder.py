"""The folder ``fix --write-patch DIR`` writes: checked before the ladder runs,
written beside DIR, and moved into place whole -- or not at all.

- **Checked first** (:func:`check_folder`): DIR is not ``''``, ``.``, ``..``,
  the current folder or one above it, a symlink, a file, or in an import root
  (site-packages); its parent exists and takes a new folder (one is made
  there and removed: ``/proc/x`` is refused as root too); an existing DIR is
  empty or the doctor's own earlier patch, and takes a new file.
- **An earlier patch is recognised, never guessed**: DIR holds only what the
  doctor writes -- ``graphbreak_doctor_patch/`` (``__init__.py``,
  ``manifest.json`` that reads as the doctor's, ``blocks/*.py``),
  ``sitecustomize.py``, ``README.txt``, the diff the manifest names
  (``*-fix.patch`` for a manifest that names none), and ``__pycache__/``
  folders of ``.pyc`` files (what Python and compileall leave). Anything else (a file of the user's,
  a symlink, a ``manifest.json`` of another shape) refuses DIR: the doctor
  deletes nothing it did not write.
- **Whole or absent** (:class:`Staged`): the patch is written to
  ``.DIR-new-*`` beside DIR with ordinary permissions (what ``mkdir`` gives
  under the umask), checked there, and renamed into place at the very end;
  an earlier patch is renamed aside (``.DIR-old-*``) and removed. SIGINT and
  SIGTERM wait while the folders are swapped, and one that came meanwhile
  undoes the swap: after any signal or failure DIR is as it was, and no
  ``.DIR-new-*`` or ``.DIR-old-*`` is left.
- **Only its owner can write it**: DIR (and the folder it lies in, unless
  that is shared with the sticky bit, as /tmp is) must not be writable by
  its group or every user, and the written files and folders lose those
  write bits (:meth:`Staged.seal`); the package refuses to load otherwise.
  Its manifest is not signed: whoever can write the folder could change a
  block and its recorded hash together.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import site
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

PACKAGE = "graphbreak_doctor_patch"
MANIFEST = "manifest.json"
SIGNALS = {signal.SIGINT, signal.SIGTERM}


class PatchError(Exception):
    """The patch cannot be written there; one line for the user."""


def import_roots() -> list[Path]:
    """Folders packages are imported from: site-packages and sys.path."""
    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    return [Path(p).resolve() for p in roots if p and Path(p).is_dir()]


def check_folder(folder: Path) -> None:
    """Before the ladder runs: a PatchError (one line) for a DIR the patch
    cannot be written to, or one that holds anything the doctor did not write."""
    shown = f"--write-patch {folder}"
    if folder.name in ("", ".."):
        raise PatchError(f"{shown}: name a folder of its own, not the current folder or one above it")
    if folder.is_symlink():
        raise PatchError(f"{shown}: is a symbolic link (to {os.readlink(folder)}); name the folder itself")
    resolved = folder.resolve()
    here = Path.cwd().resolve()
    if resolved == here or resolved in here.parents:
        raise PatchError(f"{shown}: is the current folder or one above it (DIR is replaced whole); "
                         "name a folder of its own")
    for root in import_roots():
        if resolved == root or (root.name in ("site-packages", "dist-packages") and root in resolved.parents):
            raise PatchError(f"{shown}: that is where packages are imported from ({root}); "
                             "choose a folder of its own")
    if not folder.parent.is_dir():
        raise PatchError(f"{shown}: no such folder {folder.parent}")
    if folder.exists() and not folder.is_dir():
        raise PatchError(f"{shown}: not a folder")
    for where, shared_ok in ((folder.parent, True), (folder, False)):
        why = others_can_write(where, shared_ok=shared_ok)
        if why:  # the written package would refuse to load from there
            raise PatchError(f"{shown}: {why}: whoever can write there could change what the patch runs; "
                             "choose a folder only you can write")
    if folder.is_dir():
        why = not_ours(folder)
        if why:
            raise PatchError(f"{shown}: {why}; choose a new folder")
        _probe(folder, lambda: tempfile.mkstemp(prefix=".graphbreak-doctor-probe-", dir=folder), shown)
    _probe(folder.parent, lambda: new_folder(folder, "probe"), shown)


def others_can_write(path: Path, *, shared_ok: bool = False) -> str:
    """Why someone other than its owner can write ``path`` ("" when no one
    can, or it does not exist); with ``shared_ok`` a folder shared with the
    sticky bit (/tmp), where no one can replace another's folder, is fine."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    if not st.st_mode & 0o022 or (shared_ok and st.st_mode & stat.S_ISVTX):
        return ""
    who = "every user" if st.st_mode & 0o002 else "its group"
    return f"{path} can be written by {who} ({stat.filemode(st.st_mode)})"


def _probe(where: Path, make, shown: str) -> None:
    """Make something in ``where`` and remove it: access() says yes to root
    for /proc, a read-only mount, ..."""
    try:
        made = make()
    except OSError as e:
        raise PatchError(f"{shown}: folder {where} is not writable: {e.strerror or e}") from e
    if isinstance(made, tuple):  # mkstemp: (fd, path)
        os.close(made[0])
        os.unlink(made[1])
    else:
        os.rmdir(made)


def earlier_manifest(folder: Path) -> dict | None:
    """DIR's ``graphbreak_doctor_patch/manifest.json`` when it reads as one the
    doctor writes (an object with ``versions`` and ``modules`` objects)."""
    path = folder / PACKAGE / MANIFEST
    if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    ok = isinstance(data, dict) and isinstance(data.get("versions"), dict) and isinstance(data.get("modules"), dict)
    return data if ok else None


def not_ours(folder: Path) -> str:
    """Why ``folder`` is not empty and not the doctor's earlier patch ("" when
    it is one of the two)."""
    entries = sorted(os.listdir(folder))
    if not entries:
        return ""
    package = folder / PACKAGE
    if package.is_symlink() or not package.is_dir():
        return f"the folder is not empty and holds no earlier patch (it holds {entries[0]})"
    manifest = earlier_manifest(folder)
    if manifest is None:
        return f"the folder holds a {PACKAGE}/{MANIFEST} the doctor did not write"
    diff = manifest.get("diff")
    for name in entries:
        if name == PACKAGE:
            stray = _stray_in_package(package, manifest)
        elif name == "__pycache__":
            stray = _files_only(folder, name, _pyc)
        elif name in ("sitecustomize.py", "README.txt") or name == diff or (diff is None and name.endswith("-fix.patch")):
            stray = "" if _regular(folder / name) else name
        else:
            stray = name
        if stray:
            return (f"the folder holds {stray}, which the doctor did not write (an earlier patch is replaced "
                    "whole, and nothing else is ever deleted)")
    return ""


def _regular(path: Path) -> bool:
    return not path.is_symlink() and path.is_file()


def _pyc(name: str) -> bool:
    return name.endswith(".pyc")


def _files_only(parent: Path, name: str, fits) -> str:
    """``name`` (a folder in ``parent``) or the first entry in it that is not
    a regular file ``fits`` accepts (or a ``__pycache__`` of .pyc files, as
    Python and compileall leave); "" when there is none."""
    folder = parent / name
    if folder.is_symlink() or not folder.is_dir():
        return name
    for inner in sorted(os.listdir(folder)):
        if inner == "__pycache__" and fits is not _pyc:
            stray = _files_only(folder, inner, _pyc)
            if stray:
                return f"{name}/{stray}"
        elif not fits(inner) or not _regular(folder / inner):
            return f"{name}/{inner}"
    return ""


def _stray_in_package(package: Path, manifest: dict) -> str:
    """The first entry of the package folder the doctor did not write: its
    blocks are only those its manifest names."""
    blocks = {entry.get("block", "").split("/", 1)[-1] for entry in manifest["modules"].values()
              if isinstance(entry, dict) and isinstance(entry.get("block"), str)}
    for name in sorted(os.listdir(package)):
        if name in ("__init__.py", MANIFEST):
            stray = "" if _regular(package / name) else name
        elif name == "blocks":
            stray = _files_only(package, name, lambda n: n in blocks)
        elif name == "__pycache__":
            stray = _files_only(package, name, _pyc)
        else:
            stray = name
        if stray:
            return f"{PACKAGE}/{stray}"
    return ""


def new_folder(beside: Path, tag: str) -> Path:
    """A new, empty folder ``.NAME-TAG-*`` beside ``beside``, with the
    permissions ``mkdir`` gives (0777 less the umask; mkdtemp would give 0700,
    and a server running as another user would load nothing)."""
    for _ in range(100):
        path = beside.parent / f".{beside.name}-{tag}-{secrets.token_hex(4)}"
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free name beside {beside}")


def _free_name(beside: Path, tag: str) -> Path:
    for _ in range(100):
        path = beside.parent / f".{beside.name}-{tag}-{secrets.token_hex(4)}"
        if not os.path.lexists(path):
            return path
    raise FileExistsError(f"no free name beside {beside}")


def _pending() -> bool:
    return bool(hasattr(signal, "sigpending") and signal.sigpending() & SIGNALS)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait (and are delivered when the block ends)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def mode_and_owner(path: Path) -> tuple[str, str]:
    """(``drwxr-xr-x (0755)``, the owner's name) of ``path``."""
    st = path.stat()
    try:
        import pwd

        owner = pwd.getpwuid(st.st_uid).pw_name
    except (ImportError, KeyError):
        owner = f"uid {st.st_uid}"
    return f"{stat.filemode(st.st_mode)} ({stat.S_IMODE(st.st_mode):04o})", owner


class FolderChanged(Exception):
    """DIR changed while the ladder ran into a folder the doctor may not replace."""


class Staged:
    """A patch written beside its final place: moved in by :meth:`commit`,
    removed by :meth:`discard` (a no-op once committed)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = new_folder(folder, "new")
        self.committed = False
        self.written: Any = None  # what the patch is (model.WrittenPatch), set by fix/write.py

    def seal(self) -> None:
        """Only the owner can write the written patch: the group's and every
        user's write bits are taken off whatever the umask gave (the package
        refuses to load from a folder others can write)."""
        for root, folders, files in os.walk(self.path):
            for path in (root, *(os.path.join(root, n) for n in (*folders, *files))):
                st = os.lstat(path)
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                    os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o022)

    def commit(self) -> str:
        """Move the patch into place, replacing an earlier one. A signal that
        comes meanwhile undoes it (and is delivered after): the folder is new
        and whole, or as it was. Returns a warning line, or ""."""
        with signals_held():
            # Looked at again: the folder may have been made or filled while the ladder ran.
            why = not_ours(self.folder) if os.path.isdir(self.folder) and not os.path.islink(self.folder) else (
                "it is no longer a folder" if os.path.lexists(self.folder) else "")
            if why:
                raise FolderChanged(f"--write-patch {self.folder}: {why}; nothing written")
            old = _free_name(self.folder, "old") if os.path.lexists(self.folder) else None
            if old is not None:
                os.rename(self.folder, old)
            try:
                os.rename(self.path, self.folder)
            except BaseException:
                if old is not None:
                    os.rename(old, self.folder)
                raise
            if _pending():
                os.rename(self.folder, self.path)
                if old is not None:
                    os.rename(old, self.folder)
                return ""
            self.committed = True
            if old is None:
                return ""
            try:
                shutil.rmtree(old)
            except OSError as e:
                return f"the earlier patch, moved to {old}, could not be removed: {e.strerror or e}"
        return ""

    def discard(self) -> None:
        if self.committed or not os.path.lexists(self.path):
            return
        try:
            shutil.rmtree(self.path)
        except OSError as e:
            sys.stderr.write(f"graphbreak-doctor: warning: cannot remove {self.path}: {e.strerror or e}\n")

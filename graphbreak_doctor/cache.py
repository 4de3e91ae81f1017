"""The doctor's own cache folder: ``$GRAPHBREAK_DOCTOR_CACHE``, else
``graphbreak-doctor`` under ``$XDG_CACHE_HOME`` (default ``~/.cache``).
What lives there: the findings cache (``findings/``), the matrix's
environments (``matrix-envs/``) and host builds of FlashInfer's planners
(``host-build/``) -- code the doctor runs, so each is used only from a folder
no one but the user can change (:func:`folder_problem`; docs/cache.md: the
trust model)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


CACHE_ENV = "GRAPHBREAK_DOCTOR_CACHE"
# GRAPHBREAK_DOCTOR_NO_CACHE=1: the findings cache is off (nothing recorded, read or kept).
OFF_ENV = "GRAPHBREAK_DOCTOR_NO_CACHE"


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "graphbreak-doctor"


def _mode_problem(path: Path, st: os.stat_result, *, sticky_ok: bool) -> str:
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        return f"{path} belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022 and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        return f"{path} can be written by {'every user' if st.st_mode & 0o002 else 'its group'}"
    return ""


def folder_problem(path: Path, *, own: bool = True) -> str:
    """Why the folder ``path`` (followed where it is a link) could be changed
    by someone else than this user ("" when it cannot): it, and each folder
    above it, must belong to the user or to root and be writable by no one
    else (a folder above it may be shared with the sticky bit). A part that
    does not exist yet is made by the doctor (mode 0700). With ``own``, the
    folder itself must be the user's."""
    try:
        real = Path(os.path.realpath(path))
        written = Path(os.path.abspath(path))
    except (OSError, ValueError) as e:
        return f"{path} cannot be examined ({e})"
    # The folders as written and as they resolve: a link to the folder in a
    # folder others can write could be replaced.
    return _chain_problem(real, own) or _chain_problem(written, own)


def _chain_problem(real: Path, own: bool) -> str:
    first = True
    for part in (real, *real.parents):
        try:
            st = os.stat(part)
        except FileNotFoundError:
            first = False
            continue
        except OSError as e:
            return f"{part} cannot be examined ({e.strerror or e})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{part} is not a folder"
        if first and own and st.st_uid != os.geteuid():
            return f"{part} belongs to another user (uid {st.st_uid})"
        why = _mode_problem(part, st, sticky_ok=not first)
        if why:
            return why
        first = False
    return ""


def plain_folder_problem(path: Path) -> str:
    """Why ``path`` -- a folder inside a trusted one -- is not a plain folder
    of the user's ("" when it is, or when it does not exist yet)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as e:
        return f"{path} cannot be examined ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to another user (uid {st.st_uid})"
    return _mode_problem(path, st, sticky_ok=False)


def make_private_folder(path: Path) -> None:
    """Make ``path`` and the parts of it that are missing (the last ones
    with mode 0700)."""
    missing = []
    for part in (path, *path.parents):
        if os.path.lexists(part):
            break
        missing.append(part)
    for part in reversed(missing):
        try:
            os.mkdir(part, 0o700)
        except FileExistsError:
            pass  # another doctor made it meanwhile: it is checked like any other

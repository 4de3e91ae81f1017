"""Whether the findings cache may be trusted, and the signature its entries
carry (docs/cache.md: the trust model).

The gate reads its verdict back from the cache, so whoever can write the
cache folder could decide the verdict. The cache is used only from folders
that no one but the user can change, as ssh treats its keys: the cache
folder and every folder above it belong to the user (or to root) and no one
else can write them (a shared folder with the sticky bit, such as /tmp,
above it is fine: there no one can rename or remove another's entries);
``findings/`` is a folder of its own, never a symbolic link. Else the cache
is neither read nor written and one line says why.

Every entry carries an HMAC-SHA256 of its key and its content under a secret
of the user's, ``cache-key`` in ``graphbreak-doctor`` of
``$XDG_CONFIG_HOME`` (default ``~/.config``; ``$GRAPHBREAK_DOCTOR_CACHE_KEY``
names another file), created on first use with mode 0600, outside the cache
folder: an entry restored from elsewhere (a CI cache's tarball, another
user's home) or rewritten by hand does not verify and is traced again.
Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

KEY_ENV = "GRAPHBREAK_DOCTOR_CACHE_KEY"
KEY_NAME = "cache-key"
_KEY_BYTES = 32


class Untrusted(Exception):
    """The cache may not be used: the message says why, in one line."""


def key_path() -> Path:
    override = os.environ.get(KEY_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "graphbreak-doctor" / KEY_NAME


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


def _read_key(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise Untrusted(f"its key {path} cannot be read ({e.strerror or e})") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"its key {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise Untrusted(f"its key {path} belongs to another user (uid {st.st_uid})")
        if st.st_mode & 0o077:
            raise Untrusted(f"its key {path} can be read by others (mode {stat.S_IMODE(st.st_mode):o}; 0600 is "
                            "expected)")
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    if len(data) < _KEY_BYTES:
        raise Untrusted(f"its key {path} is too short to be one")
    return data


def secret(cache_root: Path) -> bytes:
    """The user's cache key, made on first use; Untrusted when the cache
    folder or the key may not be trusted."""
    why = folder_problem(cache_root)
    if why:
        raise Untrusted(why)
    path = key_path()
    real_root = os.path.realpath(cache_root)
    if os.path.realpath(path).startswith(real_root.rstrip(os.sep) + os.sep):
        raise Untrusted(f"its key {path} lies inside the cache folder")
    why = folder_problem(path.parent)
    if why:
        raise Untrusted(f"its key's folder: {why}")
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    make_private_folder(path.parent)
    # Written whole, then linked into place: two doctors making it at once
    # both use the one that was linked first.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_hex(_KEY_BYTES).encode())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return _read_key(path)


def _canonical(key: str, entry: dict[str, Any]) -> bytes:
    body = {k: v for k, v in entry.items() if k != "mac"}
    return key.encode() + b"\n" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign(key_bytes: bytes, key: str, entry: dict[str, Any]) -> str:
    return hmac.new(key_bytes, _canonical(key, entry), hashlib.sha256).hexdigest()


def verified(key_bytes: bytes, key: str, entry: dict[str, Any]) -> bool:
    mac = entry.get("mac")
    return isinstance(mac, str) and hmac.compare_digest(mac, sign(key_bytes, key, entry))

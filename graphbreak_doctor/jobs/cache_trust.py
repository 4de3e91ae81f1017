"""Whether the findings cache may be trusted, and the signature its entries
carry (docs/cache.md: the trust model; the folder checks are
graphbreak_doctor/cache.py's, shared with the other things the cache holds).

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

from graphbreak_doctor.cache import folder_problem, make_private_folder

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

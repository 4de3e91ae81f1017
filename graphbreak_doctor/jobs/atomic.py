"""Writing a JSON file whole: a temporary file beside it, then renamed over
it, so a reader (another doctor, the parent reading a worker's result) sees
the old file or the new one, never part of one. And a lock for a file that
several doctors read, change and write (:func:`locked`). Standard library
only."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Iterator


def replace_json(path: str | os.PathLike, data: Any, *, compact: bool = False) -> None:
    """Write ``data`` to ``path`` whole; an OSError leaves no temporary file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":") if compact else None)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(path: str | os.PathLike, *, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock (``flock``) on the lock file ``path`` while the
    block runs: made when taken, removed when let go, so none is left
    behind (a holder that was killed leaves its file, free: the next holder
    takes it and removes it). Yields True; with ``wait=False``, False at once
    where another process holds it. A lock file that is a link or not a
    regular file is an OSError, never followed."""
    fd = _take(Path(path), wait)
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _take(path: Path, wait: bool) -> int | None:
    """The lock file's descriptor, locked; None where it is held (``wait=False``)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "a lock file that is not a regular file", str(path))
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(path, fd):
            return fd
        # Its holder removed it while this process waited: the lock is the file there now.
        os.close(fd)


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file ``fd`` has open."""
    try:
        there = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)

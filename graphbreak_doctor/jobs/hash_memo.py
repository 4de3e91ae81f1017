"""The sha256 of files the doctor has already hashed, kept between runs.

Every job that records its inputs (jobs/inputs.py: ``manifest``) hashes each
file it imported or read -- about 3,000 files and 120 MB for a FlashInfer
layer -- although almost none of them changed since the last job. A file
whose size, modification time and change time are as they were when it was
hashed is not read again: its hash comes from here (the same rule the cache
uses when it checks an entry). The change time cannot be set back by the
user's tools, so a rewritten file is always hashed again.

One file, ``file-hashes.json`` in the doctor's cache folder, replaced whole
(a temporary file, then a rename): two jobs writing at once leave one valid
memo, holding one of their views. A memo that cannot be read is ignored with
one line and rewritten (the doctor says so before its workers start: their
own output goes to the traced code's log); ``cache clear`` removes it.
Standard library only.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from graphbreak_doctor.cache import cache_root, make_private_folder
from graphbreak_doctor.jobs.atomic import replace_json

FORMAT = "graphbreak-doctor file hashes"
VERSION = 1
NAME = "file-hashes.json"
# Paths kept, at most: the newest job's first, then the older ones'.
LIMIT = 50_000
_BYTES_LIMIT = 64 << 20


def path() -> Path:
    return cache_root() / NAME


def _read() -> dict[str, list]:
    """The memo's files; FileNotFoundError when there is none, OSError or
    ValueError when what is there is not a memo. Opened as the cache opens
    its entries: a regular file only, never followed through a link, never
    waiting on a FIFO."""
    where = path()
    fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError("not a regular file")
        raw = f.read(_BYTES_LIMIT + 1)
    if len(raw) > _BYTES_LIMIT:
        raise ValueError(f"larger than {_BYTES_LIMIT} bytes")
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError("not a memo of this version")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ValueError("no files")
    return files


def problem() -> str:
    """One line when the memo is there and is not one ("" else): the doctor
    says it before its workers ignore it and write a new one."""
    try:
        _read()
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return _ignoring(e)
    return ""


def _ignoring(e: BaseException) -> str:
    return (f"graphbreak-doctor: ignoring the file-hash memo {ascii(str(path()))} "
            f"({type(e).__name__}: {ascii(str(e))[:200]}); files are hashed again")


def load() -> dict[str, list]:
    """path -> [size, mtime_ns, ctime_ns, sha256] as last hashed ({} when none)."""
    try:
        files = _read()
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as e:
        sys.stderr.write(_ignoring(e) + "\n")
        return {}
    return {p: v for p, v in files.items()
            if isinstance(p, str) and isinstance(v, list) and len(v) == 4
            and all(isinstance(x, int) for x in v[:3]) and isinstance(v[3], str) and len(v[3]) == 64}


def save(identities: dict[str, list], known: dict[str, list]) -> None:
    """Keep the hashed ``identities`` (a manifest's files) with the ``known``
    ones, unless nothing new was hashed."""
    fresh = {p: v for p, v in identities.items() if len(v) == 4 and len(v[3]) == 64}
    if all(known.get(p) == v for p, v in fresh.items()):
        return
    merged = {**fresh, **{p: v for p, v in known.items() if p not in fresh}}
    merged = dict(list(merged.items())[:LIMIT])
    where = path()
    make_private_folder(where.parent)
    replace_json(where, {"format": FORMAT, "version": VERSION, "files": merged}, compact=True)

"""The findings cache: a worker job whose inputs have not changed is not
traced again; its last findings are read back (docs/cache.md).

Two levels. The pre-key -- the job's arguments (less the per-run ``log`` and
``debug``), the interpreter, the current folder, the import path handed to
the worker, the memory limit and the environment variables of ``ENV_*`` --
names the entry, one file per pre-key in ``findings/`` of the doctor's cache
folder. The entry holds the inputs the worker recorded (jobs/inputs.py:
every imported module's file, every file read and folder listed, the probed
JIT and patch folders, the distributions' METADATA and versions); a lookup
re-stats each and re-hashes only those whose stat changed. Any change is a
miss: the job is traced and its entry replaced.

Entries are untrusted files: read with a size limit, checked for shape and
for their signature (jobs/cache_trust.py: the cache is used only from
folders no one else can write, and each entry carries an HMAC under the
user's key), and the paths they name are only stat-ed and hashed (regular
files, a capped number of bytes). An entry that is not one (corrupt, cut
short, another format, another key's) is ignored with one line on stderr.
A job whose inputs could not all be recorded (jobs/inputs.py: ``unknown``)
is not kept. Standard library and the model only: a hit never imports
torch.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, Callable

from graphbreak_doctor.cache import CACHE_ENV, cache_root, make_private_folder, plain_folder_problem
from graphbreak_doctor.jobs import cache_trust, hash_memo, inputs, process_inputs
from graphbreak_doctor.jobs.atomic import replace_json
from graphbreak_doctor.jobs.job import Job, Outcome
from graphbreak_doctor.model import COMPLETE, Findings
from graphbreak_doctor.model.cache_facts import CacheFacts
from graphbreak_doctor.text import escape_controls

FORMAT = "graphbreak-doctor findings cache"
VERSION = 2  # 2: signed (``mac``)
# Not part of the key: where the cache is, and whether it is used.
_NOT_KEYED = (CACHE_ENV, inputs.OFF_ENV, cache_trust.KEY_ENV)
ENTRY_LIMIT = 256 << 20  # bytes of one entry, at most
# The names of the doctor's own files in findings/: an entry (a pre-key),
# and a writer's temporary file (jobs/atomic.py). Nothing else there is ever
# removed.
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.json")
_TMP_NAME = re.compile(r"\.[0-9a-f]{64}\.json\.[0-9]+\.[0-9a-f]{8}\.tmp")
_ENTRY_HEAD = json.dumps({"format": FORMAT}, separators=(",", ":"))[:-1].encode()
_LOG_LIMIT = 8 << 20  # what the traced code wrote, kept up to this many characters


def folder() -> Path:
    return cache_root() / "findings"


def keyed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if process_inputs.keyed_variable(k) and k not in _NOT_KEYED}


def pre_key(job: Job, memory: int, environ: dict[str, str] | None = None) -> str:
    """The name of ``job``'s entry: everything known before the job runs."""
    args = {k: v for k, v in job.to_dict().items() if k not in ("log", "debug")}
    python = job.python or sys.executable
    what = {
        "format": VERSION,
        "job": args,
        "python": python,
        "cwd": os.path.abspath(job.cwd or os.getcwd()),
        "sys_path": job.import_path(),
        "memory": memory,
        "env": keyed_environment(environ),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def _entry_path(key: str) -> Path:
    return folder() / f"{key}.json"


def _ignore(path: Path, why: str) -> None:
    sys.stderr.write(escape_controls(f"graphbreak-doctor: ignoring the cache entry {path}: {why}") + "\n")


def _read_entry(path: Path) -> dict[str, Any] | None:
    """The entry at ``path`` when it is one; None (with one line on stderr
    when there is a file that is not an entry)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        _ignore(path, e.strerror or str(e))
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not _regular(f.fileno()):
                _ignore(path, "not a regular file")
                return None
            raw = f.read(ENTRY_LIMIT + 1)
    except OSError as e:
        _ignore(path, e.strerror or str(e))
        return None
    if len(raw) > ENTRY_LIMIT:
        _ignore(path, f"larger than {ENTRY_LIMIT >> 20} MiB")
        return None
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        _ignore(path, f"not JSON ({type(e).__name__}), perhaps cut short")
        return None
    why = _shape(entry)
    if why:
        _ignore(path, why)
        return None
    return entry


def _regular(fd: int) -> bool:
    import stat

    return stat.S_ISREG(os.fstat(fd).st_mode)


def _shape(entry: Any) -> str:
    """Why ``entry`` is not an entry of this format ("" when it is)."""
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return "not a graphbreak-doctor findings cache entry"
    if entry.get("version") != VERSION:
        return f"format version {entry.get('version')!r}, this graphbreak-doctor reads version {VERSION}"
    kinds = {"key": str, "stored_at": str, "inputs": dict, "outcome": dict, "log": str, "mac": str}
    for name, kind in kinds.items():
        if not isinstance(entry.get(name), kind):
            return f"its {name} is missing or not a {kind.__name__}"
    outcome = entry["outcome"]
    if not isinstance(outcome.get("message"), str) or not isinstance(outcome.get("findings"), dict):
        return "its outcome is not whole"
    return ""


def lookup(job: Job, key: str, secret: bytes) -> Outcome | None:
    """The cached outcome of ``job`` when its entry exists, is signed with
    the user's key ``secret`` and none of its inputs changed; None to trace."""
    path = _entry_path(key)
    entry = _read_entry(path)
    if entry is None:
        return None
    if not cache_trust.verified(secret, key, entry):
        _ignore(path, "its signature does not match this user's cache key (written elsewhere, or changed since)")
        return None
    if entry["key"] != key:
        _ignore(path, "it is the entry of another job")
        return None
    if not entry["inputs"].get("files"):
        _ignore(path, "it records no input: nothing says whether it still holds")
        return None
    why = inputs.changed(entry["inputs"])
    if why:  # stale: traced again, and the entry replaced
        if job.debug:
            sys.stderr.write(escape_controls(f"graphbreak-doctor: findings cache: {job.describe()} is traced again: "
                                             f"{why}") + "\n")
        return None
    try:
        findings = Findings.from_dict(entry["outcome"]["findings"])
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        _ignore(path, f"its findings are not graphbreak-doctor findings: {first}")
        return None
    findings.cache = CacheFacts(source="cache", stored_at=entry["stored_at"])
    return Outcome(job, findings=findings, message=entry["outcome"]["message"], log=entry["log"])


def storable(outcome: Outcome) -> bool:
    """Only a whole trace is kept: a crash, a time-out, a bad target or a
    worker that could not say what it read is traced again next time."""
    f = outcome.findings
    return (f is not None and outcome.status == COMPLETE and not outcome.usage and f.outcome == COMPLETE
            and isinstance(outcome.inputs, dict) and not outcome.inputs.get("unknown"))


def store(job: Job, key: str, outcome: Outcome, log: str, secret: bytes) -> None:
    """Write the entry of ``job`` atomically (a temporary file in the same
    folder, then renamed over the entry: two doctors writing at once leave
    one whole entry); a failure to write is one line on stderr."""
    findings = {**outcome.findings.to_dict(), "cache": None}  # said when read back
    entry = {
        "format": FORMAT,
        "version": VERSION,
        "key": key,
        "stored_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "job": {k: v for k, v in job.to_dict().items() if k not in ("log", "debug")},
        "inputs": outcome.inputs,
        "outcome": {"message": outcome.message, "findings": findings},
        "log": log[:_LOG_LIMIT],
    }
    entry["mac"] = cache_trust.sign(secret, key, entry)
    path = _entry_path(key)
    try:
        make_private_folder(path.parent)
        replace_json(path, entry, compact=True)
    except OSError as e:
        sys.stderr.write(escape_controls(f"graphbreak-doctor: the findings cache could not keep {job.describe()}: "
                                         f"{e.strerror or e}: {e.filename or path}") + "\n")


def _write_log(job: Job, text: str) -> None:
    """A cached job's log, where the run reads its jobs' logs (jobs/output.py: with_logs)."""
    if job.log and text:
        with open(job.log, "a", encoding="utf-8", errors="replace") as f:
            f.write(text)


def trusted_secret() -> bytes | None:
    """The user's cache key when the cache may be used; None, with one line
    on stderr saying why, when it may not (jobs/cache_trust.py)."""
    try:
        secret = cache_trust.secret(cache_root())
        why = plain_folder_problem(folder())
    except cache_trust.Untrusted as e:
        why = str(e)
    except OSError as e:
        why = f"{e.strerror or e}: {e.filename or cache_root()}"
    if why:
        sys.stderr.write(escape_controls(f"graphbreak-doctor: the findings cache is not used: {why}") + "\n")
        return None
    return secret


def run(jobs: list[Job], trace: Callable[[list[Job]], list[Outcome]], *, read: bool,
        memory: int) -> list[Outcome]:
    """The outcomes of ``jobs`` in order: each unchanged job's from the cache
    (unless not ``read``: --no-cache), the others from ``trace`` (worker
    processes), kept for next time. GRAPHBREAK_DOCTOR_NO_CACHE=1: neither
    read nor kept; a cache that may not be trusted is neither read nor kept
    either, and its workers record nothing."""
    from graphbreak_doctor.patching import UndoLog

    secret = None if inputs.cache_is_off() else trusted_secret()
    enabled = secret is not None
    memo = hash_memo.problem() if enabled else ""
    if memo:  # said here: the workers' own line goes to the traced code's log
        sys.stderr.write(escape_controls(memo) + "\n")
    read = read and enabled
    keys = [pre_key(job, memory) if enabled else "" for job in jobs]
    outcomes: list[Outcome | None] = [lookup(job, key, secret) if read else None for job, key in zip(jobs, keys)]
    for job, outcome in zip(jobs, outcomes):
        if outcome is not None:
            _write_log(job, outcome.log)
    missed = [i for i, o in enumerate(outcomes) if o is None]
    with UndoLog() as undo:
        if not enabled and not inputs.cache_is_off():
            undo.setenv(inputs.OFF_ENV, "1")  # the workers record nothing and leave the memo alone
        traced = trace([jobs[i] for i in missed]) if missed else []
    for i, outcome in zip(missed, traced):
        if outcome.findings is not None:
            outcome.findings.cache = CacheFacts(source="traced", not_kept=_not_kept(outcome) if enabled else "")
        if enabled and storable(outcome):
            from graphbreak_doctor.jobs.output import read_log

            store(jobs[i], keys[i], outcome, read_log(jobs[i].log) if jobs[i].log else "", secret)
        outcomes[i] = outcome
    return [o for o in outcomes if o is not None]


def _not_kept(outcome: Outcome) -> str:
    """Why a whole trace was not kept although the cache is on: its inputs
    could not all be known ("" else)."""
    unknown = outcome.inputs.get("unknown") if isinstance(outcome.inputs, dict) else ""
    return f"not kept in the findings cache: {unknown}" if isinstance(unknown, str) and unknown else ""


def clear() -> int:
    """Remove every entry (and a writer's leftover temporary file) and the
    file-hash memo; how many entries there were. Only the doctor's own
    files are removed -- regular files with the names the doctor gives them
    (and, for an entry, its format's first bytes) -- from ``findings/``
    itself, never through a link: a ``findings/`` that is a link, or not a
    folder, is refused (cache_trust.Untrusted) with nothing removed."""
    memo = hash_memo.path()
    if _regular_at(memo):
        try:
            os.unlink(memo)
        except FileNotFoundError:
            pass  # another doctor removed it meanwhile
    where = folder()
    try:
        fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return 0
    except OSError as e:
        if os.path.islink(where):
            raise cache_trust.Untrusted(f"{where} is a symbolic link: nothing was removed") from e
        raise cache_trust.Untrusted(f"{where} is not a folder the doctor can clear "
                                    f"({e.strerror or e}): nothing was removed") from e
    removed = 0
    try:
        for name in os.listdir(fd):
            entry, tmp = _ENTRY_NAME.fullmatch(name), _TMP_NAME.fullmatch(name)
            if not (entry or tmp) or not _ours(fd, name, check_head=bool(entry)):
                continue
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                continue  # another doctor removed or replaced it meanwhile
            removed += bool(entry)
    finally:
        os.close(fd)
    return removed


def _regular_at(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _ours(folder_fd: int, name: str, *, check_head: bool) -> bool:
    """Whether ``name`` in the open folder is a regular file of the doctor's
    (an entry starts as every entry does)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return not check_head or os.read(fd, len(_ENTRY_HEAD)) == _ENTRY_HEAD
    except OSError:
        return False
    finally:
        os.close(fd)

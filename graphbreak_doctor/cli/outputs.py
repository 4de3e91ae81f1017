"""Output files: chosen from the renderer registry, checked before anything is
traced or read, and written as a set -- every file whole, or none of them.

``--json [PATH]``, ``--html [PATH]`` (and ``--junit``, ``--sarif`` for the
gate) come from the renderers a command produces. ``auto`` (the option
without a path) means ``reports/<target>-<device>-<mode><suffix>``; a path
given for several targets gets ``-<target stem>`` added before its suffix.

The check (:func:`check_output`, the one every command and ``baseline write
-o`` uses) refuses, before anything runs: an output that is, or resolves to
(a symlink, a hard link, ``./x``), one of the command's inputs, or a file
that exists in an input folder; a folder; a
block device or socket; a folder that cannot be written (a file is created
there and removed, so ``/proc/x.json`` is refused before the trace, not
after it). A regular file is written to a temporary file beside it and
renamed into place (through a symlink: beside the file it names, the link
kept). An output that exists and is not a regular file -- a character device
such as ``/dev/null`` or a terminal, a FIFO, a symlink to either -- or that
is reached through a file descriptor's name (``/dev/stdout``, ``/dev/fd/N``,
``/proc/self/fd/N``, whatever they point at) is written in place, after the
regular files, never replaced: a FIFO no reader opens within a few seconds
is refused, not waited on. The file behind the doctor's own stdout or
stderr (``> out.log``, or a link to it) is no output's: refused, unless named
through its descriptor (``/dev/stdout``).

Every file the commands write goes through :func:`write_all`: the outputs,
the traced code's log (:func:`keep_logs`, planned with the outputs, so it
never lands on an input or another output), baselines and the matrix's cell
pages.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from graphbreak_doctor.cli.common import InternalError, UsageError, show
from graphbreak_doctor.render import GATE, Renderer, file_renderers
from graphbreak_doctor.text import one_line

REPORTS = Path("reports")
AUTO = "auto"


def option_dest(renderer: Renderer) -> str:
    return renderer.option.lstrip("-").replace("-", "_")


def add_output_options(p: argparse.ArgumentParser, *kinds: str, default_on: tuple[str, ...] = (),
                       what: str = "<mode>", stem: str = "<target>-<device>-") -> None:
    """One option per file renderer of these kinds; renderers named in
    ``default_on`` write by default (and get a --no-X to turn them off)."""
    group = p.add_argument_group("outputs")
    for r in file_renderers(*kinds):
        dest = option_dest(r)
        per_target = _per_subject(r)
        where = f"default path: reports/{stem}{what}{r.suffix}" if per_target else "PATH required"
        if r.name in default_on:
            group.add_argument(r.option, dest=dest, nargs="?", const=AUTO, default=AUTO, metavar="PATH",
                               help=f"write {r.help} (on by default; {where})")
            group.add_argument(f"--no-{dest}", dest=dest, action="store_const", const=None,
                               help=f"do not write {r.help}")
        elif per_target:
            group.add_argument(r.option, dest=dest, nargs="?", const=AUTO, metavar="PATH",
                               help=f"write {r.help} ({where})")
        else:
            group.add_argument(r.option, dest=dest, metavar="PATH", help=f"write {r.help}")


def _per_subject(r: Renderer) -> bool:
    """One file per traced target (or per diff); the gate's files are one per run."""
    return r.renders != GATE


def output_path(option: str, stem: str, count: int, suffix: str) -> Path:
    """Where an output goes: reports/<stem><suffix> for "auto"; the given path
    for one target; the given path with "-<stem>" added for several."""
    if option == AUTO:
        return REPORTS / f"{stem}{suffix}"
    path = Path(option)
    return path if count == 1 else path.with_name(f"{path.stem}-{stem}{path.suffix or suffix}")


# Options that name what a command reads: an output may never be one of them.
INPUT_OPTIONS = ("findings", "paths", "a", "b", "baseline", "from_path", "ladder", "config")


def inputs_of(args: argparse.Namespace) -> list[str]:
    """The paths a command reads, from its options (see INPUT_OPTIONS)."""
    found: list[str] = []
    for name in INPUT_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, str) and v)
    return found


def _identity(path: str | os.PathLike) -> tuple[str, tuple[int, int] | None]:
    """(resolved path, (device, inode) if it exists) -- what makes two names one file."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        real = os.path.abspath(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return real, None
    return real, (st.st_dev, st.st_ino)


def _fd_chain(path: str | os.PathLike) -> list[str]:
    """The names a path passes through to its file: itself, then each symlink's
    target in turn (at most 40, the kernel's own limit)."""
    chain = [os.path.abspath(path)]
    for _ in range(40):
        try:
            if not os.path.islink(chain[-1]):
                break
            chain.append(os.path.normpath(os.path.join(os.path.dirname(chain[-1]), os.readlink(chain[-1]))))
        except (OSError, ValueError):
            break
    return chain


# A file descriptor's name: /dev/fd/N, /proc/self/fd/N, /proc/PID/fd/N,
# /proc/PID/task/TID/fd/N (not /proc/self/cwd/..., which names a path).
_FD_NAME = re.compile(r"^/(dev/fd|proc/(self|thread-self|\d+)(/task/\d+)?/fd)/\d+$")


def through_fd(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a file by one of its file descriptors
    (``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``): whatever it points
    at is written through, never replaced by a rename."""
    return any(_FD_NAME.match(name) for name in _fd_chain(path))


def _own_fd(path: str | os.PathLike) -> int | None:
    """The descriptor of this process that ``path`` names (``/dev/stdout`` is
    1), if it names one: written through that descriptor, so what the doctor
    prints there and the file stay in order."""
    own = ("/proc/self/fd/", f"/proc/{os.getpid()}/fd/", "/dev/fd/")
    for name in _fd_chain(path):
        for prefix in own:
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                return int(name[len(prefix):])
    return None


def writes_in_place(path: str | os.PathLike) -> bool:
    """An existing output that is a character device or a FIFO (or a symlink to
    one), or one named through a file descriptor: written in place, never
    replaced by a regular file."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or through_fd(path)


def own_stream(path: str | os.PathLike) -> str | None:
    """"stdout" or "stderr" when ``path`` is, or links to (a symlink, a hard
    link), the regular file behind the doctor's own stdout or stderr (a
    shell's ``> out.log``): written over, it would lose what the doctor
    prints there. None otherwise, and for a name that reaches it through a
    file descriptor (``/dev/stdout``), which is written through, after what
    the doctor printed."""
    if through_fd(path):
        return None
    _, ident = _identity(path)
    if ident is None:
        return None
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            st = os.fstat(fd)
        except OSError:  # closed: no file behind it
            continue
        if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == ident:
            return name
    return None


def _refuse_own_stream(path: str | os.PathLike, label: str) -> None:
    stream = own_stream(path)
    if stream:
        raise UsageError(f"{label}: is the doctor's own {stream} (redirected to that file); refusing to write over "
                         f"it (/dev/{stream} adds it after what the doctor prints there; or choose another path)")


def check_output(path: str | os.PathLike, inputs: Iterable[str] = (), *, create_parent: bool = False,
                 what: str = "") -> None:
    """The one check of an output path, run before anything is traced or read:
    a UsageError (one line) for an output that is one of ``inputs``, the file
    behind the doctor's own stdout or stderr, a folder, a block device or
    socket, or in a folder that cannot be written."""
    shown = str(path)
    label = f"{what} {shown}" if what else shown
    if "\x00" in shown:
        raise UsageError(f"{label!r}: a path cannot hold a NUL byte")
    _refuse_own_stream(path, label)
    real, ident = _identity(path)
    for given in inputs:
        other_real, other = _identity(given)
        if real == other_real or (ident is not None and ident == other):
            raise UsageError(f"{label}: is the input {given}; refusing to overwrite an input (choose another path)")
        if os.path.lexists(path) and os.path.isdir(given) and real.startswith(other_real.rstrip(os.sep) + os.sep):
            raise UsageError(f"{label}: is a file of the input folder {given}; refusing to overwrite an input "
                             "(choose another path)")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise UsageError(f"{label}: cannot write: {e.strerror or e}") from e
    if mode is not None:
        if stat.S_ISDIR(mode):
            raise UsageError(f"{label}: is a folder, not a file")
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or through_fd(path):
            if not os.access(path, os.W_OK):
                raise UsageError(f"{label}: cannot write: permission denied")
            return  # written in place (writes_in_place)
        if not stat.S_ISREG(mode):
            raise UsageError(f"{label}: is not a regular file, a character device or a FIFO; refusing to write it")
    parent = Path(path).parent
    if create_parent and not parent.is_dir():
        parent = parent.parent  # reports/ is created when it is missing: its parent must take it
    if not parent.is_dir():
        raise UsageError(f"{label}: no such folder {Path(path).parent}")
    try:  # a real probe: access() says yes to root for /proc, a read-only mount, ...
        fd, probe = tempfile.mkstemp(prefix=".graphbreak-doctor-probe-", dir=parent)
    except OSError as e:
        raise UsageError(f"{label}: folder {parent} is not writable: {e.strerror or e}") from e
    os.close(fd)
    os.unlink(probe)


@dataclass
class _Planned:
    path: Path
    renderer: Renderer
    key: str  # which subject: a target's stem, or "" for the gate report
    ours: bool  # a default location the doctor may create


@dataclass
class OutputSet:
    planned: list[_Planned] = field(default_factory=list)
    # Where each subject's log of the traced code's output goes (None: nowhere).
    logs: dict[str, Path | None] = field(default_factory=dict)

    @classmethod
    def plan(cls, args: argparse.Namespace, kinds: tuple[str, ...], stems: list[str]) -> OutputSet:
        """The files the options ask for, checked now: before anything is
        traced or read (every command plans its outputs first)."""
        out = cls()
        for r in file_renderers(*kinds):
            option = getattr(args, option_dest(r), None)
            if not option:
                continue
            if _per_subject(r):
                for stem in stems:
                    out.planned.append(_Planned(output_path(option, stem, len(stems), r.suffix), r, stem,
                                                option == AUTO))
            else:
                out.planned.append(_Planned(Path(option), r, "", False))
        inputs = inputs_of(args)
        out._check(inputs)
        out._plan_logs(stems, inputs)
        return out

    def _check(self, inputs: list[str]) -> None:
        seen: dict[str, str] = {}
        for p in self.planned:
            check_output(p.path, inputs, create_parent=p.ours)
            where, _ = _identity(p.path)
            if where in seen and not writes_in_place(p.path):
                raise UsageError(f"{p.path}: asked for twice ({seen[where]} and {p.renderer.option})")
            seen[where] = p.renderer.option

    def _plan_logs(self, stems: list[str], inputs: list[str]) -> None:
        """Each subject's log beside its first output that is a regular file:
        ``<name>.log``, else ``<name><suffix>.log`` where that would be an
        input, another output, the file behind the doctor's own stdout or
        stderr (check_output) or a file that cannot be written; no log where
        neither can be (a device or FIFO is no place to put one beside)."""
        taken = [_identity(p.path) for p in self.planned] + [_identity(i) for i in inputs]
        for stem in stems:
            self.logs[stem] = None
            first = next((p for p in self.planned if p.key == stem and not writes_in_place(p.path)), None)
            if first is None:
                continue
            for candidate in (first.path.with_suffix(".log"), first.path.with_name(first.path.name + ".log")):
                real, ident = _identity(candidate)
                if any(real == r or (ident is not None and ident == i) for r, i in taken):
                    continue
                if os.path.islink(candidate):  # a file nobody named: never written through a link
                    continue
                try:
                    check_output(candidate, inputs, create_parent=first.ours)
                except UsageError:
                    continue
                self.logs[stem] = candidate
                taken.append((real, ident))
                break

    def write(self, subjects: dict[str, Any], announce: bool = True) -> list[Path]:
        """Render every planned file from ``subjects`` (stem -> findings, "" ->
        the gate report), then write them all (write_all). A renderer that
        fails costs its own file only: the others are written, then the
        failure is an InternalError naming it."""
        texts: list[tuple[_Planned, str]] = []
        failed: list[str] = []
        for p in self.planned:
            try:
                texts.append((p, p.renderer.render(subjects[p.key])))
            except Exception as e:  # valid findings the renderer fails on: our bug, not the user's input
                failed.append(f"the {p.renderer.name} renderer failed ({p.path} not written): {type(e).__name__}: {e}")
        write_all([(p.path, text, p.ours) for p, text in texts])
        if announce:
            for p, _ in texts:
                show(f"{p.renderer.title or p.renderer.name} written to {p.path}\n")
        if failed:
            raise InternalError("; ".join(failed))
        return [p.path for p, _ in texts]


# How long a FIFO output may wait for a reader before it is refused.
FIFO_READER_WAIT = 5.0


def write_all(files: list[tuple[Path, str, bool]]) -> None:
    """The one writer: each (path, text, create_parent) whole or none of them.
    Outputs written in place (devices, FIFOs, a file descriptor's name) are
    opened first -- a FIFO without a reader is refused before any file is
    touched --, then every regular file goes to a temporary file beside the
    file it names (through a symlink: beside its target, the link kept),
    renamed into place only when all are complete; the in-place ones are
    written last. Text that cannot be encoded (a lone surrogate) is written
    as its escape. A UsageError (one line) when a file cannot be written,
    and before anything is written when one is the file behind the doctor's
    own stdout or stderr."""
    in_place = [(Path(path), text) for path, text, _ in files if writes_in_place(path)]
    regular = [(Path(path), text, ours) for path, text, ours in files if not writes_in_place(path)]
    for path, _, _ in regular:
        _refuse_own_stream(path, str(path))
    opened = []
    temps: list[tuple[Path, Path]] = []
    try:
        for path, text in in_place:
            opened.append((_open_in_place(path), path, text))
        for path, text, ours in regular:
            target = _link_target(path)
            try:
                temps.append((_write_temp(target, text, create_parent=ours), target))
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror or e}") from e
        for tmp, target in temps:
            try:
                os.replace(tmp, target)
            except OSError as e:
                raise UsageError(f"cannot write {target}: {e.strerror or e}") from e
        sys.stdout.flush()
        sys.stderr.flush()
        for stream, path, text in opened:
            try:
                stream.write(text)
                stream.flush()
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        for stream, _, _ in opened:
            try:
                stream.close()
            except OSError as e:  # the text was flushed; a close error is the file system's to report
                print(f"graphbreak-doctor: warning: closing an output: {e.strerror or e}", file=sys.stderr)


def _link_target(path: Path) -> Path:
    """Where a regular output's bytes go: the file a symlink names (so the
    link stays a link), else the path itself."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def _open_in_place(path: Path):
    """A text stream on an output written in place. One of this process's
    own descriptors (``/dev/stdout``, redirected to a file or not) is written
    through a copy of it, after what the doctor printed there; another
    process's regular file reached through a descriptor's name is appended
    to; a FIFO must have a reader within FIFO_READER_WAIT seconds."""
    try:
        mode = os.stat(path).st_mode
        own = _own_fd(path)
        if own is not None:
            fd = os.dup(own)
        elif stat.S_ISFIFO(mode):
            fd = _open_fifo(path)
        elif stat.S_ISREG(mode):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        else:
            fd = os.open(path, os.O_WRONLY)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from e
    return os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")


def _open_fifo(path: Path) -> int:
    deadline = time.monotonic() + FIFO_READER_WAIT
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no process has it open for reading
                raise
            if time.monotonic() >= deadline:
                raise UsageError(f"{path}: a FIFO that nothing reads (waited {FIFO_READER_WAIT:g} s); "
                                 "refusing to wait for a reader") from None
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return fd


def _write_temp(path: Path, text: str, *, create_parent: bool) -> Path:
    """The whole text in a temporary file beside ``path``, with ordinary permissions."""
    if create_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
        # mkstemp creates 0600; a report is an ordinary file (0666 less umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_file(path: str | os.PathLike, text: str) -> Path:
    """One file (a baseline, a matrix cell's page), written whole or not at
    all (in place when it is a device, a FIFO or a file descriptor's name)."""
    write_all([(Path(path), text, False)])
    return Path(path)


def keep_logs(outputs: OutputSet, stems: list[str], logs: list[str], *,
              unkept: str = "--verbose shows it") -> None:
    """Each target's log where the outputs' plan put it (beside its first
    output file, never on an input or another output), written whole or not
    at all, after the outputs; its path on the terminal. ``unkept``: how
    else to see a log when there is no place to keep it."""
    for stem, text in zip(stems, logs):
        if not text:
            continue
        path = outputs.logs.get(stem)
        if path is None:
            print(f"the traced code wrote to stdout/stderr: {unkept} (no output file to keep it beside)")
            continue
        try:
            write_file(path, text)
        except UsageError as e:  # the outputs are written; the run's verdict stands
            show(f"graphbreak-doctor: warning: {one_line(str(e))}\n", sys.stderr)
            continue
        show(f"Log of the traced code's output written to {path}\n")

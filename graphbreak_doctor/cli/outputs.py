"""Output files: chosen from the renderer registry, checked before anything is
traced or read, and written as a set -- every file whole, or none of them.

``--json [PATH]``, ``--html [PATH]`` (and ``--junit``, ``--sarif`` for the
gate) come from the renderers a command produces. ``auto`` (the option
without a path) means ``reports/<target>-<device>-<mode><suffix>``; a path
given for several targets gets ``-<target stem>`` added before its suffix.

The check (:func:`check_output`, the one every command and ``baseline write
-o`` uses) refuses, before anything runs: an output that is, or resolves to
(a symlink, a hard link, ``./x``), one of the command's inputs; a folder; a
block device or socket; a folder that cannot be written (a file is created
there and removed, so ``/proc/x.json`` is refused before the trace, not
after it). A regular file is written to a temporary file beside it and
renamed into place. An output that exists and is not a regular file -- a
character device such as ``/dev/null`` or a terminal, a FIFO, a symlink to
either (``/dev/stdout``) -- is written in place, after the regular files,
never replaced by a regular file.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from graphbreak_doctor.cli.common import InternalError, UsageError, show
from graphbreak_doctor.render import GATE, Renderer, file_renderers

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


def writes_in_place(path: str | os.PathLike) -> bool:
    """An existing output that is a character device or a FIFO (or a symlink to
    one): written in place, never replaced by a regular file."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def check_output(path: str | os.PathLike, inputs: Iterable[str] = (), *, create_parent: bool = False,
                 what: str = "") -> None:
    """The one check of an output path, run before anything is traced or read:
    a UsageError (one line) for an output that is one of ``inputs``, a folder,
    a block device or socket, or in a folder that cannot be written."""
    shown = str(path)
    label = f"{what} {shown}" if what else shown
    if "\x00" in shown:
        raise UsageError(f"{label!r}: a path cannot hold a NUL byte")
    real, ident = _identity(path)
    for given in inputs:
        other_real, other = _identity(given)
        if real == other_real or (ident is not None and ident == other):
            raise UsageError(f"{label}: is the input {given}; refusing to overwrite an input (choose another path)")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise UsageError(f"{label}: cannot write: {e.strerror or e}") from e
    if mode is not None:
        if stat.S_ISDIR(mode):
            raise UsageError(f"{label}: is a folder, not a file")
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
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
        out._check(inputs_of(args))
        return out

    def _check(self, inputs: list[str]) -> None:
        seen: dict[str, str] = {}
        for p in self.planned:
            check_output(p.path, inputs, create_parent=p.ours)
            where, _ = _identity(p.path)
            if where in seen and not writes_in_place(p.path):
                raise UsageError(f"{p.path}: asked for twice ({seen[where]} and {p.renderer.option})")
            seen[where] = p.renderer.option

    def path_for(self, key: str) -> Path | None:
        """The first file planned for one subject (a target's stem)."""
        return next((p.path for p in self.planned if p.key == key), None)

    def write(self, subjects: dict[str, Any], announce: bool = True) -> list[Path]:
        """Render every planned file from ``subjects`` (stem -> findings, "" ->
        the gate report), then write them all: temporary files first, renamed
        into place only when every one is complete; outputs that are devices
        or FIFOs are written in place last."""
        texts = []
        for p in self.planned:
            try:
                texts.append(p.renderer.render(subjects[p.key]))
            except Exception as e:  # valid findings the renderer fails on: our bug, not the user's input
                raise InternalError(f"the {p.renderer.name} renderer failed: {type(e).__name__}: {e}") from e
        regular = [(p, text) for p, text in zip(self.planned, texts) if not writes_in_place(p.path)]
        in_place = [(p, text) for p, text in zip(self.planned, texts) if writes_in_place(p.path)]
        temps: list[Path] = []
        try:
            for p, text in regular:
                temps.append(_write_temp(p.path, text, create_parent=p.ours))
            for (p, _), tmp in zip(regular, temps):
                os.replace(tmp, p.path)
        except OSError as e:
            failed = regular[len(temps)][0].path if len(temps) < len(regular) else None
            for tmp in temps:
                tmp.unlink(missing_ok=True)
            where = failed or (e.filename and Path(e.filename)) or "output"
            raise UsageError(f"cannot write {where}: {e.strerror or e}") from e
        except BaseException:
            for tmp in temps:
                tmp.unlink(missing_ok=True)
            raise
        for p, text in in_place:
            _write_in_place(p.path, text)
        if announce:
            for p in self.planned:
                show(f"{p.renderer.title or p.renderer.name} written to {p.path}\n")
        return [p.path for p in self.planned]


def _write_in_place(path: Path, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from e


def _write_temp(path: Path, text: str, *, create_parent: bool) -> Path:
    """The whole text in a temporary file beside ``path``, with ordinary permissions."""
    if create_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
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
    """One file (a baseline), written whole or not at all (in place when it
    is a device or a FIFO)."""
    if writes_in_place(path):
        _write_in_place(Path(path), text)
        return Path(path)
    tmp = _write_temp(Path(path), text, create_parent=False)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Path(path)


def keep_logs(outputs: OutputSet, stems: list[str], logs: list[str], *,
              unkept: str = "--verbose shows it") -> None:
    """Each target's log beside its first output file (<stem>.log), written
    whole or not at all, after the outputs; its path on the terminal.
    ``unkept``: how else to see a log when there is no output file."""
    for stem, text in zip(stems, logs):
        if not text:
            continue
        where = outputs.path_for(stem)
        if where is None:
            print(f"the traced code wrote to stdout/stderr: {unkept} (no output file to keep it beside)")
            continue
        path = where.with_suffix(".log")
        try:
            write_file(path, text)
        except OSError as e:  # the outputs are written; the run's verdict stands
            print(f"graphbreak-doctor: warning: cannot write {path}: {e.strerror or e}", file=sys.stderr)
            continue
        print(f"Log of the traced code's output written to {path}")

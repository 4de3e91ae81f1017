"""Output files: chosen from the renderer registry, checked before anything is
traced, and written as a set -- every file whole, or none of them.

``--json [PATH]``, ``--html [PATH]`` (and ``--junit``, ``--sarif`` for the
gate) come from the renderers a command produces. ``auto`` (the option
without a path) means ``reports/<target>-<device>-<mode><suffix>``; a path
given for several targets gets ``-<target stem>`` added before its suffix.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphbreak_doctor.cli.common import InternalError, UsageError
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
        """The files the options ask for, checked now (before tracing)."""
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
        out._check()
        return out

    def _check(self) -> None:
        seen: dict[Path, str] = {}
        for p in self.planned:
            where = p.path.resolve()
            if where in seen:
                raise UsageError(f"{p.path}: asked for twice ({seen[where]} and {p.renderer.option})")
            seen[where] = p.renderer.option
            if p.path.is_dir():
                raise UsageError(f"{p.path}: is a folder, not a file")
            parent = p.path.parent
            if p.ours:
                continue  # reports/ is created when it is missing
            if not parent.is_dir():
                raise UsageError(f"{p.path}: no such folder {parent}")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise UsageError(f"{p.path}: folder {parent} is not writable")

    def path_for(self, key: str) -> Path | None:
        """The first file planned for one subject (a target's stem)."""
        return next((p.path for p in self.planned if p.key == key), None)

    def write(self, subjects: dict[str, Any], announce: bool = True) -> list[Path]:
        """Render every planned file from ``subjects`` (stem -> findings, "" ->
        the gate report), then write them all: temporary files first, renamed
        into place only when every one is complete."""
        texts = []
        for p in self.planned:
            try:
                texts.append(p.renderer.render(subjects[p.key]))
            except Exception as e:  # valid findings the renderer fails on: our bug, not the user's input
                raise InternalError(f"the {p.renderer.name} renderer failed: {type(e).__name__}: {e}") from e
        temps: list[Path] = []
        try:
            for p, text in zip(self.planned, texts):
                temps.append(_write_temp(p.path, text, create_parent=p.ours))
            for p, tmp in zip(self.planned, temps):
                os.replace(tmp, p.path)
        except OSError as e:
            failed = self.planned[len(temps)].path if len(temps) < len(self.planned) else None
            for tmp in temps:
                tmp.unlink(missing_ok=True)
            where = failed or (e.filename and Path(e.filename)) or "output"
            raise UsageError(f"cannot write {where}: {e.strerror or e}") from e
        except BaseException:
            for tmp in temps:
                tmp.unlink(missing_ok=True)
            raise
        if announce:
            for p in self.planned:
                print(f"{p.renderer.title or p.renderer.name} written to {p.path}")
        return [p.path for p in self.planned]


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
    """One file (a baseline), written whole or not at all."""
    tmp = _write_temp(Path(path), text, create_parent=False)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Path(path)

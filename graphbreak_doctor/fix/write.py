"""``fix --write-patch DIR``: the changes the ladder kept, written where a
server can load them.

DIR gets:
- ``<name>.patch``: a unified diff against the installed files (each block of
  fix/emit.py appended to its module's file), for ``patch -p1`` from the
  folder those files are imported from (site-packages);
- ``graphbreak_doctor_patch/``: a standalone package (fix/patch_runtime.py,
  ``manifest.json``, ``blocks/``) that makes the same changes at import;
- ``sitecustomize.py``: imports the package in every Python process started
  with ``PYTHONPATH=DIR`` (a server and every process it spawns);
- ``README.txt``: what each change does and removes, what it was proven on,
  how it was checked, and how to take it out.

Nothing is written into an import root (site-packages); the folder is written
beside DIR and moved into place, so DIR is whole or absent.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import json
import os
import shutil
import site
import sys
import tempfile
from pathlib import Path

from graphbreak_doctor.model import Findings, PatchChange, WrittenPatch
from graphbreak_doctor.fix import patch_runtime
from graphbreak_doctor.fix.emit import NAMESPACE

PACKAGE = "graphbreak_doctor_patch"
MANIFEST = "manifest.json"

SITECUSTOMIZE = f'''"""Loads {PACKAGE} (graphbreak-doctor's written patch) in every Python
process started with PYTHONPATH set to this folder; then runs the
environment's own sitecustomize, which this file hides."""

import {PACKAGE}

{PACKAGE}.chain_sitecustomize(__file__)
'''


class PatchError(Exception):
    """The patch cannot be written there; one line for the user."""


def import_roots() -> list[Path]:
    """Folders packages are imported from: site-packages and sys.path."""
    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    return [Path(p).resolve() for p in roots if p and Path(p).is_dir()]


def check_folder(folder: Path) -> None:
    """Before the ladder runs: DIR may be new or a patch written before, and
    never inside an import root (a written patch is loaded on purpose, with
    PYTHONPATH, not by landing in site-packages)."""
    resolved = folder.resolve()
    for root in import_roots():
        if resolved == root or (root.name in ("site-packages", "dist-packages") and root in resolved.parents):
            raise PatchError(f"--write-patch {folder}: that is where packages are imported from ({root}); "
                             "choose a folder of its own")
    if folder.exists() and not folder.is_dir():
        raise PatchError(f"--write-patch {folder}: not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / PACKAGE / MANIFEST).is_file():
        raise PatchError(f"--write-patch {folder}: the folder is not empty and holds no earlier patch; "
                         "choose a new folder")


def module_root(module: str, file: str) -> Path:
    """The folder ``module`` is imported from (``import a.b`` from a/b.py)."""
    path = Path(file).resolve()
    depth = module.count(".") + (1 if path.name == "__init__.py" else 0)
    return path.parents[depth]


def _distribution(module: str) -> tuple[str, str] | None:
    top = module.split(".")[0]
    dists = importlib.metadata.packages_distributions().get(top) or []
    for dist in dists:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def plan(findings: Findings) -> tuple[list[PatchChange], list[str]]:
    """(the changes to write, in order; what is left out and why)."""
    fix = findings.fix
    changes = list(fix.changes) if fix else []
    kept = [c for c in changes if c.block]
    left = [f"change {c.step} ({c.recipe}): {c.why_not}" for c in changes if not c.block]
    return kept, left


def diff_text(kept: list[PatchChange]) -> tuple[str, dict[str, dict]]:
    """(the unified diff; per module: its manifest entry and block text)."""
    modules: dict[str, dict] = {}
    for c in kept:
        entry = modules.setdefault(c.module, {"file": c.file, "blocks": [], "functions": []})
        entry["blocks"].append(c.block)
        if c.function not in entry["functions"]:
            entry["functions"].append(c.function)
    parts = []
    for name, entry in modules.items():
        path = Path(entry["file"])
        data = path.read_bytes()
        text = data.decode("utf-8")
        rel = path.resolve().relative_to(module_root(name, entry["file"])).as_posix()
        appended = ("" if text.endswith("\n") or not text else "\n") + "\n\n" + "\n\n".join(entry["blocks"])
        entry["sha256"] = hashlib.sha256(data).hexdigest()
        entry["rel"] = rel
        entry["text"] = "\n\n".join(entry["blocks"])
        parts.append("".join(difflib.unified_diff(text.splitlines(keepends=True),
                                                  (text + appended).splitlines(keepends=True),
                                                  f"a/{rel}", f"b/{rel}")))
    return "".join(parts), modules


def write(folder: Path, name: str, findings: Findings) -> WrittenPatch:
    """Write the patch to ``folder`` (replacing an earlier patch there)."""
    kept, left = plan(findings)
    if not kept:
        raise PatchError("the ladder kept no change the doctor can write as a patch"
                         + (f" ({'; '.join(left)})" if left else ""))
    diff, modules = diff_text(kept)
    versions = dict(filter(None, (_distribution(m) for m in modules)))
    manifest = {"versions": versions, "modules": {}}
    written = WrittenPatch(folder=str(folder), diff=f"{name}.patch", diff_text=diff, versions=versions)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        package = staging / PACKAGE
        (package / "blocks").mkdir(parents=True)
        for module, entry in modules.items():
            block = f"blocks/{module.replace('.', '_')}.py"
            (package / block).write_text(entry["text"], encoding="utf-8")
            manifest["modules"][module] = {"file": entry["rel"], "sha256": entry["sha256"],
                                           "functions": entry["functions"], "block": block}
        (package / "__init__.py").write_text(Path(patch_runtime.__file__).read_text(encoding="utf-8"),
                                             encoding="utf-8")
        (package / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        (staging / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        (staging / written.diff).write_text(diff, encoding="utf-8")
        (staging / "README.txt").write_text(readme(findings, written, kept, left), encoding="utf-8")
        _replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return written


def update_readme(findings: Findings, written: WrittenPatch) -> None:
    """Write README.txt again, with the fresh-process check's outcome."""
    kept, left = plan(findings)
    target = Path(written.folder) / "README.txt"
    tmp = target.with_name(".README.txt.tmp")
    tmp.write_text(readme(findings, written, kept, left), encoding="utf-8")
    os.replace(tmp, target)


def _replace(staging: Path, folder: Path) -> None:
    old = None
    if folder.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{folder.name}-old-", dir=folder.parent))
        os.rmdir(old)
        os.rename(folder, old)
    os.rename(staging, folder)
    if old is not None:
        shutil.rmtree(old)


def _where(size: int | None) -> str:
    return f"size {size}" if size is not None else "the target's own size"


def _does(change: PatchChange) -> str:
    name = change.function
    return {
        "memo": f"{name} answers the calls seen in the warm-ups from a table filled before capture (at the start of "
                "each torch.compile, in the process that compiles); any other call runs it as before",
        "custom_op": f"{name} becomes one opaque op, torch.ops.{NAMESPACE}.{change.module.split('.')[0]}_{name}, "
                     "with a fake that gives the output shapes: Dynamo keeps the call as one node and never traces "
                     "inside",
        "registered_op": f"under torch.compile, {name} calls the op the library registers for it (with the library's "
                         "own fake); outside it, the original",
    }.get(change.kind, change.kind)


def readme(findings: Findings, written: WrittenPatch, kept: list[PatchChange], left: list[str]) -> str:
    folder = written.folder
    rungs = {r.step: r for r in findings.ladder}
    lines = [
        f"graphbreak-doctor patch for {findings.target.title or findings.target.spec}",
        "",
        f"Proven on: {', '.join(f'{d} {v}' for d, v in sorted(written.versions.items())) or 'the files as they are'}"
        f" (torch {findings.environment.get('torch', '?')}, device {findings.device.get('name', '?')}).",
        "The package refuses, with one line on stderr, to patch any other version.",
        "",
        f"Checked: {written.summary or 'not checked in a fresh process'}",
        *(f"  {_where(c.size)}: {c.outcome}" for c in written.checks),
        "",
        "Sizes the server uses: " + (f"{', '.join(map(str, written.sizes))} ({written.sizes_from})"
                                     if written.sizes else "none known; checked at the target's own size"),
        "",
        "Changes (each is a block of Python appended to the module that defines the function):",
    ]
    for c in kept:
        rung = rungs.get(c.step)
        removes = f"[{rung.category}] {rung.gb_type} at {rung.site}" if rung else "?"
        lines += [f"  {c.step}. {c.recipe}: {c.module}.{c.function}",
                  f"     does: {_does(c)}",
                  f"     removes: {removes}",
                  f"     holds for: {c.holds}"]
    if left:
        lines += ["", "Not in this patch:", *(f"  {why}" for why in left)]
    if findings.fix and not findings.fix.ok:
        lines += ["", f"The ladder did not reach fullgraph: {findings.fix.stopped}"]
    lines += [
        "",
        "Load it (every process the server starts inherits PYTHONPATH):",
        f"  PYTHONPATH={folder}${{PYTHONPATH:+:$PYTHONPATH}} python -m sglang.launch_server ...",
        f"  (or `import {PACKAGE}` first thing in your own entry point)",
        "",
        "Or change the installed files instead (what a fork or a vendored copy commits):",
        f"  cd <site-packages> && patch -p1 < {folder}/{written.diff}",
        "",
        "Take it out: drop the folder from PYTHONPATH (or delete it); for the diff,",
        f"  cd <site-packages> && patch -p1 -R < {folder}/{written.diff}",
        "",
    ]
    return "\n".join(lines)

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
beside DIR, checked there, and moved into place at the end, so DIR is whole or
as it was (fix/folder.py: what DIR may be, and how it is replaced).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import json
from pathlib import Path

from graphbreak_doctor.model import Findings, PatchChange, WrittenPatch
from graphbreak_doctor.fix import patch_runtime
from graphbreak_doctor.fix.emit import NAMESPACE
from graphbreak_doctor.fix.folder import MANIFEST, PACKAGE, PatchError, Staged, mode_and_owner

# The first line of every sitecustomize.py the doctor writes (and wrote): how
# one patch's sitecustomize knows another's and skips it.
MARK = f'"""Loads {PACKAGE} (graphbreak-doctor\'s written patch)'

SITECUSTOMIZE = MARK + f''' in every Python
process started with PYTHONPATH set to this folder; then runs the
environment's own sitecustomize, which this file hides: the first one on
sys.path that is not a written patch's (two patch folders never run each
other's). A package that cannot be imported is one line on stderr, and the
process goes on unpatched."""


def _load():
    import sys

    try:
        import {PACKAGE}  # (it checks everything, then patches, at import)
    except Exception as e:
        sys.stderr.write(f"{PACKAGE}: cannot be imported ({{type(e).__name__}}: {{e!r}}): "
                         "nothing is patched, the process goes on unpatched\\n")
        return
    if not hasattr({PACKAGE}, "STATE"):  # a folder without its __init__.py imports as an empty namespace
        sys.stderr.write("{PACKAGE}: the package's __init__.py is missing: "
                         "nothing is patched, the process goes on unpatched\\n")


def _chain():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    for entry in list(sys.path):
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None:
            continue
        if spec.origin and os.path.isfile(spec.origin):
            with open(spec.origin, encoding="utf-8", errors="replace") as f:
                if f.read({len(MARK)}) == {MARK!r}:
                    continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return


_load()
_chain()
del _load, _chain
'''


def module_root(module: str, file: str) -> Path:
    """The folder ``module`` is imported from (``import a.b`` from a/b.py)."""
    path = Path(file).resolve()
    depth = module.count(".") + (1 if path.name == "__init__.py" else 0)
    return path.parents[depth]


def _distribution(module: str, rel: str) -> tuple[str, str] | None:
    """(distribution, version) of the installed library ``module`` belongs
    to: the one whose files hold ``rel``, as the package checks at import."""
    top = module.split(".")[0]
    found = []
    for dist in importlib.metadata.packages_distributions().get(top) or []:
        try:
            found.append((dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return next((d for d in found if patch_runtime.in_distribution(module, rel, d[0])), found[0] if found else None)


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
        # The module global the block changes: the function, or the class whose method it replaces ("Cls.name").
        changed = c.function.split(".", 1)[0]
        if changed not in entry["functions"]:
            entry["functions"].append(changed)
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


def stage(folder: Path, name: str, findings: Findings) -> Staged:
    """Write the patch for ``folder`` beside it (``Staged.path``); the caller
    checks it there, then commits (moves it into place) or discards it."""
    kept, left = plan(findings)
    if not kept:
        raise PatchError("the ladder kept no change the doctor can write as a patch"
                         + (f" ({'; '.join(left)})" if left else ""))
    diff, modules = diff_text(kept)
    dists = {m: _distribution(m, entry["rel"]) for m, entry in modules.items()}
    versions = dict(d for d in dists.values() if d)
    manifest = {"versions": versions, "diff": f"{name}.patch", "modules": {}}
    written = WrittenPatch(folder=str(folder), diff=f"{name}.patch", diff_text=diff, versions=versions)
    staged = Staged(folder)
    staged.written = written
    try:
        package = staged.path / PACKAGE
        (package / "blocks").mkdir(parents=True)
        for module, entry in modules.items():
            block = f"blocks/{module.replace('.', '_')}.py"
            data = entry["text"].encode("utf-8")
            (package / block).write_bytes(data)
            manifest["modules"][module] = {
                "file": entry["rel"], "sha256": entry["sha256"],
                "distribution": dists[module][0] if dists[module] else None,
                "functions": entry["functions"], "block": block, "block_sha256": hashlib.sha256(data).hexdigest()}
        (package / "__init__.py").write_text(Path(patch_runtime.__file__).read_text(encoding="utf-8"),
                                             encoding="utf-8")
        (package / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        try:  # the package's own check, here: never write a patch it would refuse
            patch_runtime.check_manifest(manifest, str(package))
        except patch_runtime.Refused as e:
            raise PatchError(f"the package would refuse it: {e}") from e
        (staged.path / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        (staged.path / written.diff).write_text(diff, encoding="utf-8")
        update_readme(findings, written, staged)
        staged.seal()
    except BaseException:
        staged.discard()
        raise
    return staged


def update_readme(findings: Findings, written: WrittenPatch, staged: Staged) -> None:
    """(Re)write README.txt in the staged folder (again after the check)."""
    kept, left = plan(findings)
    mode, owner = mode_and_owner(staged.path)
    (staged.path / "README.txt").write_text(readme(findings, written, kept, left, (mode, owner)), encoding="utf-8")


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
        "outside_compile": f"{name}, which torch forbids in a graph, does nothing under torch.compile; outside it, "
                           "the original",
        "config": f"torch._dynamo.config.{name} is set when "
                  + ("torch imports its config" if change.module == "torch._dynamo.config" else
                     f"{change.module} is imported (it defines what the option is given)")
                  + ", for every compile of the process",
        "rewrite": f"{name} is replaced by its own source, changed at the line that broke (the diff shows the "
                   "change)",
    }.get(change.kind, change.kind)


def readme(findings: Findings, written: WrittenPatch, kept: list[PatchChange], left: list[str],
           access: tuple[str, str]) -> str:
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
        *(f"  {_where(c.size)}: {c.outcome}" + (f"; the user's program: {c.program}" if c.program else "")
          for c in written.checks),
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
        f"Who can load it: this folder is {access[0]}, owned by {access[1]} (what mkdir gives under the umask).",
        "A process running as another user loads the patch only if it can read the folder and every file in it;",
        "one that cannot gets no patch, and Python says nothing (it finds no sitecustomize.py).",
        f"  chmod -R a+rX {folder}    # lets every user read it",
        "",
        "Take it out: drop the folder from PYTHONPATH (or delete it); for the diff,",
        f"  cd <site-packages> && patch -p1 -R < {folder}/{written.diff}",
        "",
    ]
    return "\n".join(lines)

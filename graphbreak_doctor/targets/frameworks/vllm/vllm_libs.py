"""vLLM's native libraries, which need a CUDA build of torch.

Every ``.so`` in the installed vLLM package that does not load here gets an
empty module under its import name (vLLM imports some unguarded, at module
level), and the op schemas its bytes declare (``schemas_in``) are declared,
without a kernel, in the namespace vLLM's own Python calls them by: the
package's sources are read for ``torch.ops.<namespace>.<name>``, and an op
named in several namespaces goes to the one that holds most of the
library's ops (its own; the others are other platforms' libraries). An op
of the library that no source names goes to that namespace too; a library
none of whose ops is named declares nothing (a line says so).

Nothing here is written for one release: a new vLLM's libraries, ops and
namespaces are found the same way. The ops that answer a question about the
build at import time (which kernels a device has) get the doctor's answer
(catalogue.HOST_ANSWERS); fakes come after vLLM's import
(``register_missing_fakes``): vLLM's own where it registers them."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from graphbreak_doctor.emulation.standins import catalogue, custom_all_reduce
from graphbreak_doctor.emulation.standins.binaries import (
    StandIns, declared, empty_module, loads, no_load_of, package_dir,
)
from graphbreak_doctor.emulation.standins.schemas import schemas_in
from graphbreak_doctor.patching import UndoLog

_OP_REFERENCE = re.compile(r"torch\.ops\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
_BARE_NAMESPACE = re.compile(r"=\s*torch\.ops\.([A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)
# A namespace the package's Python defines ops in itself (its custom ops):
# never a native library's.
_OWN_LIBRARY = re.compile(r"Library\(\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")

# What _op_references read, per package folder and its newest source's stat.
_READ: dict[tuple[str, int], dict[str, set[str]]] = {}


def install_vllm(log: UndoLog, out: StandIns) -> None:
    home = package_dir("vllm")
    if home is None:
        return
    unloaded = [(so, why) for so in sorted(home.rglob("*.so")) if (why := loads(str(so)))]
    if not unloaded:
        return
    references = _op_references(home)
    no_load_of(log, {str(so.resolve()) for so, _why in unloaded})
    for so, why in unloaded:
        module = ".".join((so.relative_to(home.parent).with_suffix("")).parts).split(".abi3", 1)[0]
        module = module.split(".cpython", 1)[0]
        empty_module(log, module, f"vLLM's {so.name}")
        declared_here, unparsed, namespaces = _declare(log, out, so, references)
        where = ", ".join(f"{ns}::{{{n} ops}}" for ns, n in namespaces.most_common())
        if declared_here:
            out.lines.append(f"{module}: an empty module; {where}: the schemas its binary declares, no kernel "
                             f"(the library does not load here: {why})")
        else:
            out.lines.append(f"{module}: an empty module, no op declared (the library does not load here: {why})")
        if unparsed:
            out.lines.append(f"{module}: {len(unparsed)} schemas not declared, this torch cannot parse them "
                             f"({', '.join(n for n, _ in unparsed[:4])}{', ...' if len(unparsed) > 4 else ''}: "
                             f"{unparsed[0][1]})")
    # vLLM's custom all-reduce: its ops keep the library's account of the
    # buffers registered with the peers, in the namespace vLLM calls them by.
    for namespace in sorted(references.get("init_custom_ar", ())):
        if declared(f"{namespace}::init_custom_ar"):
            custom_all_reduce.install(log, out, namespace)


def _declare(log: UndoLog, out: StandIns, so: Path,
             references: dict[str, set[str]]) -> tuple[list[str], list[tuple[str, str]], Counter]:
    schemas = {text.split("(", 1)[0]: text for text in reversed(schemas_in(so))}  # the first of a name wins
    own = Counter(ns for name in schemas for ns in references.get(name.split(".")[0], ()))
    if not own:  # the ops are called through the namespace object: the one its loader beside it names
        bare = _bare_namespaces(so.parent)
        if len(bare) != 1:
            return [], [], Counter()
        own = Counter({bare.pop(): 1})
    home_namespace = own.most_common(1)[0][0]
    done, unparsed, namespaces, answered = [], [], Counter(), []
    for name, text in sorted(schemas.items()):
        op = name.split(".")[0]  # an overload (``name.out``) goes where its op goes
        namespace = max(references.get(op) or {home_namespace}, key=lambda ns: (own[ns], ns))
        qualname = f"{namespace}::{name}"
        if declared(qualname):
            continue
        library = out.library(log, namespace)
        try:
            library.define(text)
        except Exception as e:  # a schema this torch refuses is left out, and named
            unparsed.append((name, next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)))
            continue
        if qualname in catalogue.HOST_ANSWERS:
            library.impl(name, catalogue.HOST_ANSWERS[qualname][0], "CompositeExplicitAutograd")
            answered.append(f"{name} ({catalogue.HOST_ANSWERS[qualname][1]})")
        if op == name:  # fakes are per op: its overloads share them
            out.declared.append(qualname)
        done.append(qualname)
        namespaces[namespace] += 1
    if answered:
        out.lines.append(f"{so.name}: host queries answered from the doctor's catalogue: {', '.join(answered)}")
    return done, unparsed, namespaces


def _bare_namespaces(folder: Path) -> set[str]:
    """The namespaces the Python files in ``folder`` name as ``torch.ops.<ns>``
    and use as an object (``ops = torch.ops.<ns>``)."""
    found: set[str] = set()
    for source in folder.glob("*.py"):
        found.update(_BARE_NAMESPACE.findall(source.read_text(errors="replace")))
    return found


def _op_references(home: Path) -> dict[str, set[str]]:
    """op name -> the namespaces the package's Python calls it by, less
    those its Python defines ops in itself."""
    sources = sorted(home.rglob("*.py"))
    key = (str(home), max((s.stat().st_mtime_ns for s in sources), default=0))
    if key not in _READ:
        found: dict[str, set[str]] = {}
        python_owned: set[str] = set()
        for source in sources:
            text = source.read_text(errors="replace")
            if "torch.ops." not in text and "Library(" not in text:
                continue
            python_owned.update(_OWN_LIBRARY.findall(text))
            for namespace, name in _OP_REFERENCE.findall(text):
                found.setdefault(name, set()).add(namespace)
        _READ[key] = {name: kept for name, namespaces in found.items() if (kept := namespaces - python_owned)}
    return _READ[key]


__all__ = ["install_vllm"]

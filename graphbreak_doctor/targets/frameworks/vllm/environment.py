"""A vLLM release's environment (a matrix cell of ``--vllm``).

It starts from the project's vLLM file (``vllm.txt``, package data of the
matrix, the file the Makefile's vLLM environment installs): vLLM and the
pure-Python packages its launch resolution, model loader and model code
import, every one pinned and installed without dependencies (vLLM declares
the CUDA stack, which never runs here). The cell's vLLM, FlashInfer and
torch replace the file's pins.

A release is written against its own pins, not the file's: once it is
installed, each of its requirements on a package the file pins, where the
file's version does not meet it, is followed -- the release's ``==`` pin, or
the lowest version its range allows (the version of its day) -- and those
packages are installed with their dependencies (a newer release of a
package can need a package the file does not have). The cell's own axes are
never followed: where the release asks another torch or FlashInfer than the
cell holds, the environment's notes say so (each cell line shows them). Nor
is a version the cell's FlashInfer refuses (its own requirement on the
package): the file's is kept, and noted -- the cell runs the FlashInfer it
is about.
"""

from __future__ import annotations

from graphbreak_doctor.targets.frameworks.environment import Installer, Recipe, exact_pins, norm_name, pin

PROFILE = "vllm.txt"
# The version of the rules below: part of a vLLM environment's key (matrix/envs.py),
# so an environment built by other rules is built again.
RULES = 2
# The cell's own axes: the environment holds the cell's versions whatever the release asks.
AXES = ("vllm", "torch", "flashinfer-python")


def recipe(release: str, flashinfer: str, torch: str, read) -> Recipe:
    """The file's lines with the cell's vLLM, FlashInfer and torch (where
    given) in place of its pins: one file, installed without dependencies."""
    lines = pin(pin(read(PROFILE), "vllm", release), "flashinfer-python", flashinfer)
    lines = pin(lines, "torch", torch) if torch else lines
    return Recipe({"nodeps.txt": "\n".join(lines) + "\n"}, rules=(RULES,))


def _requirements(lines: list[str]) -> list:
    """The requirements of metadata lines that apply here (no extra's; markers evaluated)."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is None or ("extra" not in str(requirement.marker) and requirement.marker.evaluate()):
            out.append(requirement)
    return out


def choose(requires: list[str], pins: dict[str, str], release: str,
           flashinfer: list[str] = ()) -> tuple[dict[str, str], list[str]]:
    """What to install where the release's requirements (its metadata's
    lines) and the file's pins (normalised name -> version) disagree: the
    packages to follow (name -> version), and a note for each disagreement
    that is kept (a cell axis, a range without a lowest version, or one the
    cell's FlashInfer refuses: ``flashinfer``, its requirement lines; the
    cell runs the FlashInfer it is about, so its requirement wins)."""
    theirs = {norm_name(r.name): r.specifier for r in _requirements(list(flashinfer))}
    follow: dict[str, str] = {}
    notes: list[str] = []
    for requirement in _requirements(requires):
        name = norm_name(requirement.name)
        have = pins.get(name)
        if have is None or requirement.specifier.contains(have, prereleases=True):
            continue
        asked = f"{requirement.name}{requirement.specifier}"
        if name in AXES:
            notes.append(f"vLLM {release} asks {asked}; the cell holds {have}")
            continue
        pinned = [s.version for s in requirement.specifier if s.operator == "=="]
        floors = [s.version for s in requirement.specifier if s.operator in (">=", "~=")]
        from packaging.version import Version

        chosen = pinned[0] if pinned else max(floors, key=Version) if floors else ""
        if chosen and name in theirs and not theirs[name].contains(chosen, prereleases=True):
            notes.append(f"vLLM {release} asks {asked}; the cell's FlashInfer asks {requirement.name}{theirs[name]}: "
                         f"kept {have}")
        elif chosen:
            follow[name] = chosen
        else:
            notes.append(f"vLLM {release} asks {asked}; kept {have} (no version of its own to follow)")
    return follow, notes


def follow(release: str, files: dict[str, str], env: Installer) -> tuple[dict[str, str], list[str]]:
    """Install the release's own versions where the file's do not meet its
    requirements; returns what was followed and the notes."""
    release_requires, flashinfer_requires, _present = env.requires("vllm", "flashinfer-python")
    chosen, notes = choose(release_requires, exact_pins(files["nodeps.txt"].splitlines()), release, flashinfer_requires)
    if chosen:
        env.install(*(f"{name}=={version}" for name, version in sorted(chosen.items())),
                    what=f"installing vllm {release}'s own versions of {', '.join(sorted(chosen))}")
    return chosen, notes

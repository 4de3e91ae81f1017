"""What releases pin: a requirement list's exact pins, the version of a
package's time (envs.py FOLLOW_TIME), and the torch an SGLang release pins,
read from its wheel's metadata (matrix --torch release)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from graphbreak_doctor.jobs import lifetime
from graphbreak_doctor.text import one_line


class EnvError(Exception):
    """An environment could not be built: one line why."""


def norm_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def version_key(text: str):
    from packaging.version import Version

    return Version(text)


def release_torch(sglang: str, find_links: list[str]) -> str:
    """The torch an SGLang release pins (``torch==V`` among its requirements),
    read from its wheel's metadata, which this interpreter's pip downloads
    (without dependencies) from its configured indexes and ``find_links``;
    "" where the release pins none. EnvError where the wheel cannot be had."""
    import email.parser
    import zipfile

    links = [a for link in find_links for a in ("--find-links", link)]
    with lifetime.owned_folder("graphbreak-doctor-pin-") as tmp:
        out = subprocess.run(lifetime.command([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                               "--disable-pip-version-check", "-d", tmp, *links,
                                               f"sglang=={sglang}"]),
                             check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if out.returncode != 0 or not wheels:
            lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
            raise EnvError(f"reading sglang {sglang}'s torch pin: {one_line(' '.join(lines[-2:]) or 'no wheel')}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            name = next((n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")), None)
            if name is None:
                raise EnvError(f"reading sglang {sglang}'s torch pin: its wheel has no METADATA")
            metadata = email.parser.Parser().parsestr(wheel.read(name).decode("utf-8", "replace"))
    return exact_pins(metadata.get_all("Requires-Dist") or []).get("torch", "")


def of_its_time(name: str, release: list[str], flashinfer: list[str]) -> tuple[str, str, str] | None:
    """(version, "[extras]", conflict) of ``name`` as FOLLOW_TIME chooses it
    from the release's and the FlashInfer's requirement lines (``conflict``:
    why it is not the release's own, "" where it is); None where neither names it."""
    from packaging.requirements import InvalidRequirement, Requirement

    def wanted(lines: list[str]) -> tuple[str, str, Any] | None:
        for line in lines:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if norm_name(requirement.name) != norm_name(name) or (requirement.marker and "extra" in str(requirement.marker)):
                continue
            pins = [s.version for s in requirement.specifier if s.operator == "=="]
            floors = sorted((s.version for s in requirement.specifier if s.operator == ">="), key=version_key)
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            version = pins[0] if pins else floors[-1] if floors else ""
            return (version, extras, requirement.specifier) if version else None
        return None

    mine, theirs = wanted(release), wanted(flashinfer)
    if mine and (theirs is None or theirs[2].contains(mine[0], prereleases=True)):
        return mine[0], mine[1], ""
    if theirs is None:
        return None
    conflict = (f"the release asks {name}{mine[2]} ({mine[0]} of its time), the FlashInfer {name}{theirs[2]}: "
                "the FlashInfer's is installed" if mine else "")
    return theirs[0], (mine[1] if mine else "") or theirs[1], conflict


def pin(lines: list[str], package: str, version: str) -> list[str]:
    """``lines`` with the requirement of ``package`` replaced by ==version."""
    out, found = [], False
    for line in lines:
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
        if name and norm_name(name.group(1)) == norm_name(package):
            out.append(f"{package}=={version}")
            found = True
        else:
            out.append(line)
    if not found:
        out.append(f"{package}=={version}")
    return out


def exact_pins(requirements: list[str]) -> dict[str, str]:
    """name -> version of the ``name==version`` requirements (not an extra's)."""
    pins = {}
    for requirement in requirements:
        text, _, marker = requirement.split("#", 1)[0].partition(";")
        if "extra" in marker:
            continue
        m = re.match(r"\s*([A-Za-z0-9._-]+)\s*==\s*([A-Za-z0-9.+!-]+)\s*$", text)
        if m:
            pins[norm_name(m.group(1))] = m.group(2)
    return pins

"""The torch a framework's release pins, read from its wheel's metadata
(matrix --torch release). The helpers over requirement lines live with the
frameworks' environment recipes (targets/frameworks/environment.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from graphbreak_doctor.jobs import lifetime
from graphbreak_doctor.targets.frameworks.environment import EnvError, exact_pins, norm_name, version_key  # noqa: F401
from graphbreak_doctor.text import one_line


def release_torch(distribution: str, release: str, find_links: list[str]) -> str:
    """The torch a release of ``distribution`` pins (``torch==V`` among its requirements),
    read from its wheel's metadata, which this interpreter's pip downloads
    (without dependencies) from its configured indexes and ``find_links``;
    "" where the release pins none. EnvError where the wheel cannot be had."""
    import email.parser
    import zipfile

    links = [a for link in find_links for a in ("--find-links", link)]
    with lifetime.owned_folder("graphbreak-doctor-pin-") as tmp:
        out = subprocess.run(lifetime.command([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                               "--disable-pip-version-check", "-d", tmp, *links,
                                               f"{distribution}=={release}"]),
                             check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if out.returncode != 0 or not wheels:
            lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
            raise EnvError(f"reading {distribution} {release}'s torch pin: {one_line(' '.join(lines[-2:]) or 'no wheel')}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            name = next((n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")), None)
            if name is None:
                raise EnvError(f"reading {distribution} {release}'s torch pin: its wheel has no METADATA")
            metadata = email.parser.Parser().parsestr(wheel.read(name).decode("utf-8", "replace"))
    return exact_pins(metadata.get_all("Requires-Dist") or []).get("torch", "")



"""The doctor a matrix cell's environment installs: the one that is running.

Run from a checkout (an editable install, or the package imported from a
checkout's folder), an environment installs that checkout editable, and its
cells run the checkout's code as it is when they run. Run from an installed
distribution (a wheel in site-packages), an environment installs a wheel
rebuilt from the distribution's installed files, as its RECORD lists them:
the same bytes, without the compiled caches, the entry-point scripts the
installer generated, and the installer's own records (INSTALLER, REQUESTED,
direct_url.json, the RECORD itself, written anew).

``identity()`` names what an environment got: the checkout's folder, or the
distribution's version and a digest of its files -- part of each
environment's key (matrix/envs.py), so a doctor of another version or with
other contents builds environments of its own.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import graphbreak_doctor

DISTRIBUTION = "graphbreak-doctor"
# What the installer writes into the .dist-info folder of its own accord: not
# part of the wheel it installed (RECORD is written again for the rebuilt one).
_INSTALLER_RECORDS = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")


class SourceError(Exception):
    """The running doctor cannot be installed elsewhere: one line why."""


@dataclass(frozen=True)
class DoctorSource:
    kind: str  # "checkout" or "distribution"
    folder: Path  # the checkout, or the folder the distribution is installed in (site-packages)
    version: str = ""  # the distribution's version
    files: tuple[str, ...] = ()  # a distribution's files, relative to ``folder`` (its wheel's members)
    digest: str = ""  # sha256 of those files' names and bytes

    def identity(self) -> dict[str, str]:
        if self.kind == "checkout":
            return {"from": "checkout", "path": str(self.folder)}
        return {"from": "distribution", "version": self.version, "digest": self.digest}

    def install_args(self, scratch: Path) -> list[str]:
        """What ``uv pip install --no-deps`` installs: the checkout editable,
        or the distribution's wheel, rebuilt in ``scratch``."""
        if self.kind == "checkout":
            return ["-e", str(self.folder)]
        return [str(self.wheel(scratch))]

    def wheel(self, scratch: Path) -> Path:
        """The distribution's files as a wheel in ``scratch``, with a RECORD of its own."""
        dist_info = next((f.split("/", 1)[0] for f in self.files if f.split("/", 1)[0].endswith(".dist-info")), "")
        if not dist_info:
            raise SourceError(f"the installed {DISTRIBUTION} in {self.folder} lists no .dist-info folder in its "
                              f"RECORD: reinstall {DISTRIBUTION}")
        tags = [line.split(":", 1)[1].strip() for line in self._text(f"{dist_info}/WHEEL").splitlines()
                if line.startswith("Tag:")]
        if not tags:
            raise SourceError(f"{self.folder / dist_info / 'WHEEL'} names no wheel tag: reinstall {DISTRIBUTION}")
        name = re.sub(r"[-_.]+", "_", DISTRIBUTION)
        path = Path(scratch) / f"{name}-{self.version}-{tags[0]}.whl"
        record = []
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
            for rel in self.files:
                data = self._bytes(rel)
                whl.writestr(rel, data)
                hashed = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                record.append(f"{rel},sha256={hashed},{len(data)}")
            record.append(f"{dist_info}/RECORD,,")
            whl.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
        return path

    def _bytes(self, rel: str) -> bytes:
        try:
            return (self.folder / rel).read_bytes()
        except OSError as e:
            raise SourceError(f"{self.folder / rel}, a file of the installed {DISTRIBUTION} {self.version}, "
                              f"cannot be read ({e.strerror or e}): reinstall {DISTRIBUTION}") from None

    def _text(self, rel: str) -> str:
        return self._bytes(rel).decode("utf-8", "replace")


@functools.lru_cache(maxsize=None)
def running() -> DoctorSource:
    """The doctor this process runs (read once per process); SourceError
    when it is neither a checkout's nor an installed distribution's."""
    package = Path(graphbreak_doctor.__file__).resolve().parent
    home = package.parent
    if (home / "pyproject.toml").is_file():
        return DoctorSource("checkout", home)
    for dist in importlib.metadata.distributions(name=DISTRIBUTION, path=[str(home)]):
        listed = [str(f) for f in dist.files or ()]
        if f"{package.name}/__init__.py" not in listed:
            continue
        files = tuple(sorted(f for f in listed if _in_wheel(f)))
        source = DoctorSource("distribution", home, dist.version, files)
        digest = hashlib.sha256()
        for rel in files:
            data = source._bytes(rel)
            digest.update(f"{rel}\0{len(data)}\0".encode())
            digest.update(data)
        return DoctorSource("distribution", home, dist.version, files, digest.hexdigest()[:16])
    raise SourceError(f"the running graphbreak_doctor ({package}) is neither a checkout's nor an installed "
                      f"{DISTRIBUTION} with a RECORD of its files: the matrix's environments cannot install it "
                      f"(pip install {DISTRIBUTION}, or run it from a checkout)")


def _in_wheel(rel: str) -> bool:
    parts = rel.split("/")
    if parts[0] in ("..", "") or "__pycache__" in parts or rel.endswith((".pyc", ".pyo")):
        return False  # outside the install folder (scripts), or compiled by the installer
    return not (parts[0].endswith(".dist-info") and len(parts) == 2 and parts[1] in _INSTALLER_RECORDS)

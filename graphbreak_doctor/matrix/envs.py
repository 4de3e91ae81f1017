"""One isolated environment per (framework release, FlashInfer, torch), built with uv and kept.

An environment starts from the pinned requirement files that ship with the
package (``matrix/requirements/``, package data; the Makefile installs the
same files): ``ci.txt`` without a framework, else the files its framework's
recipe names for the release (``Framework.environment``: SGLang's profile
pair, vLLM's one file; targets/frameworks/<name>/environment.py), installed
with their dependencies (``base.txt``) and without (``nodeps.txt``). The
cell's versions replace the files' pins; once the release is installed its
framework follows what it is picky about (``Framework.follow_release``,
read from the installed release's metadata); torch is held at the
version this interpreter runs (a constraint: no other torch is ever chosen),
and the doctor itself is the one running, as matrix/doctor_source.py installs
it (a checkout editable; an installed distribution as the wheel of its
files, whose version and digest are part of the environment's key). An
environment is ready once its manifest is written, last; a second run finds
the manifest and builds nothing. uv's cache hard-links the packages, so
environments share their files.

A build holds its environment's lock file (``.<name>.lock``) while it runs,
and removes it when it ends, built, failed or stopped (jobs/atomic.py:
locked); an environment without a manifest whose lock nobody holds was left
by a killed run, and the next run's Environments removes it and its lock file
(with the killed run's ``graphbreak-doctor-env-*`` temporary folder:
jobs/lifetime.py). uv runs so that it dies with the doctor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from graphbreak_doctor.cache import cache_root, folder_problem
from graphbreak_doctor.jobs import lifetime
from graphbreak_doctor.jobs.atomic import locked
from graphbreak_doctor.matrix import doctor_source
# EnvError, of_its_time and release_torch are this module's too (callers import them from here).
from graphbreak_doctor.matrix.pins import release_torch  # noqa: F401
from graphbreak_doctor.targets.frameworks import registry
from graphbreak_doctor.targets.frameworks.environment import (EnvError, Installer, Recipe, base_recipe,  # noqa: F401
                                                              of_its_time, version_key)
from graphbreak_doctor.text import one_line

# Package data (pyproject.toml): an installed doctor has them as a checkout does.
REQUIREMENTS = Path(__file__).resolve().parent / "requirements"
MANIFEST = "matrix-env.json"


def installed(package: str) -> str:
    """The version of ``package`` in this interpreter ("" if absent)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def torch_version() -> str:
    return installed("torch")


def uv_binary() -> str:
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise EnvError("uv, which builds the matrix's environments, is not installed here "
                           "(pip install uv; it comes with graphbreak-doctor's own dependencies)") from None
        return found


def pip_find_links() -> list[str]:
    """The wheel folders pip is configured to look in (its configuration
    files and PIP_FIND_LINKS): uv reads neither, and the installed torch
    often comes from such a folder (a CPU build no index serves). None
    where this interpreter has no pip."""
    if importlib.util.find_spec("pip") is None:
        return []
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=False, capture_output=True,
                         text=True, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise EnvError(f"reading pip's configuration: {one_line(out.stderr) or 'pip config list failed'}")
    links: list[str] = []
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith(".find-links"):
            links += [p for p in value.strip().strip("'\"").split() if p]
    return links


def running_doctor() -> doctor_source.DoctorSource:
    """The doctor each environment installs: the running one (EnvError where it cannot be)."""
    try:
        return doctor_source.running()
    except doctor_source.SourceError as e:
        raise EnvError(str(e)) from None


def default_envs_dir() -> Path:
    return cache_root() / "matrix-envs"


def _read(name: str) -> list[str]:
    path = REQUIREMENTS / name
    if not path.is_file():
        raise EnvError(f"{path} is missing: the matrix builds its environments from the requirement files "
                       "that ship with graphbreak-doctor (reinstall it)")
    return path.read_text(encoding="utf-8").splitlines()


@dataclass(frozen=True)
class EnvSpec:
    """What one environment holds: a framework's release (``framework`` ""
    for none: the reference layer, or a provider's targets without one), a
    FlashInfer release, and a torch release ("" = the torch this interpreter
    runs)."""

    framework: str = ""
    release: str = ""
    flashinfer: str = ""
    torch: str = ""

    @property
    def label(self) -> str:
        framework = f"{self.framework} {self.release}, " if self.framework else ""
        return framework + f"flashinfer {self.flashinfer}" + (f", torch {self.torch}" if self.torch else "")

    def recipe(self) -> Recipe:
        """What it installs, as its framework's recipe gives it (EnvError, one line, where it cannot)."""
        if not self.framework:
            return Recipe({"base.txt": "\n".join(base_recipe(_read, self.flashinfer, self.torch)) + "\n"})
        try:
            framework = registry.get(self.framework)
        except ValueError as e:
            raise EnvError(str(e)) from None
        return framework.environment(self.release, self.flashinfer, self.torch, _read)

    def requirement_files(self) -> dict[str, str]:
        """File name -> text, as installed (base first, then --no-deps)."""
        return dict(self.recipe().files)

    def key(self, torch: str) -> str:
        recipe = self.recipe()
        text = json.dumps([sys.version, self.torch or torch, running_doctor().identity(), recipe.files,
                           list(recipe.rules)])
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def folder_name(self, torch: str) -> str:
        what = f"{self.framework}-{self.release}-" if self.framework else "reference-"
        held = f"torch-{self.torch}-" if self.torch else ""
        return f"{what}flashinfer-{self.flashinfer}-{held}{self.key(torch)}"


@dataclass
class Env:
    spec: EnvSpec
    path: Path
    built: bool  # built by this run (False: found ready)
    seconds: float  # set-up time of this run: building, or finding it ready

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    @property
    def notes(self) -> list[str]:
        """What the build could not hold as the release asks (its manifest's
        ``notes``: a package where the release and the FlashInfer disagree);
        [] for a manifest written before the build kept notes, or one that
        cannot be read (the cell then says nothing of its environment)."""
        try:
            notes = json.loads((self.path / MANIFEST).read_text(encoding="utf-8")).get("notes")
        except (OSError, ValueError, AttributeError):
            return []
        return [str(n) for n in notes] if isinstance(notes, list) else []


class Environments:
    """The environments under ``root``: each created by uv when a cell first
    needs it, found again afterwards; ``find_links``: local
    wheel folders handed to uv besides the package index."""

    def __init__(self, root: Path, find_links: list[str] | None = None) -> None:
        self.root = Path(root)
        unsafe = folder_problem(self.root)
        if unsafe:  # their interpreters run as the user: whoever can write there could replace them
            raise EnvError(f"the environments' folder: {unsafe}; the matrix runs environments only from a folder "
                           "no one else can write (--envs DIR)")
        self.torch = torch_version()
        if not self.torch:
            raise EnvError("torch is not installed in this environment: the matrix holds every cell at its version")
        self.uv = uv_binary()  # no environment can be built without it: said before any cell runs
        self.doctor = running_doctor()  # nor without a doctor to install in it
        links = list(find_links or []) + pip_find_links()
        self.find_links = list(dict.fromkeys(links))
        self.sweep()

    def sweep(self) -> list[Path]:
        """Remove what killed runs left: half-built environments (no manifest)
        whose lock nobody holds, their temporary folders, and lock files
        nobody holds. Returns the environments removed."""
        lifetime.sweep_temp()
        removed: list[Path] = []
        if not self.root.is_dir():
            return removed
        for path in sorted(self.root.iterdir()):
            if not path.is_dir() or path.name.startswith(".") or (path / MANIFEST).is_file():
                continue
            lock = self._lock(path)
            if not lock.is_file():
                continue  # not an environment of ours
            with contextlib.suppress(OSError), locked(lock, wait=False) as mine:
                if mine and not (path / MANIFEST).is_file():  # not being built now
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(path)
        for lock in self.root.glob(".*.lock"):  # a killed build's, its folder gone: taken, and so removed
            with contextlib.suppress(OSError), locked(lock, wait=False):
                pass
        return removed

    def _lock(self, path: Path) -> Path:
        """The lock an environment's build holds (two runs building the same
        one): made when the build starts, removed when it ends, however."""
        return self.root / f".{path.name}.lock"

    def held(self, spec: EnvSpec) -> EnvSpec:
        """``spec`` with its torch left out where it is this interpreter's
        own release (2.13.0 for 2.13.0+cpu): the environment is the one any
        cell without a torch axis uses."""
        if spec.torch and spec.torch == self.torch.split("+", 1)[0]:
            return dataclasses.replace(spec, torch="")
        return spec

    def path(self, spec: EnvSpec) -> Path:
        return self.root / self.held(spec).folder_name(self.torch)

    def ready(self, spec: EnvSpec) -> bool:
        return (self.path(spec) / MANIFEST).is_file()

    def ensure(self, spec: EnvSpec) -> Env:
        """The environment, built unless ready; EnvError (one line) if it cannot be."""
        start = time.monotonic()
        path = self.path(spec)
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self._lock(path)):
            if (path / MANIFEST).is_file():
                return Env(spec, path, built=False, seconds=time.monotonic() - start)
            shutil.rmtree(path, ignore_errors=True)  # a build that did not finish
            try:
                self._create(self.held(spec), path)
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)
                raise
        return Env(spec, path, built=True, seconds=time.monotonic() - start)

    def remove(self, spec: EnvSpec) -> None:
        shutil.rmtree(self.path(spec), ignore_errors=True)

    def _uv(self, *args: str, what: str) -> str:
        command = lifetime.command([self.uv, *args])
        result = subprocess.run(command, check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            lines = [ln.strip(" ×╰─▶│") for ln in result.stderr.splitlines() if ln.strip(" ×╰─▶│")]
            raise EnvError(f"{what}: {one_line(' '.join(lines[-3:]) or f'uv exited with {result.returncode}')}")
        return result.stdout

    def _install(self, python: str, *args: str, what: str, constraints: str) -> None:
        links = [a for link in self.find_links for a in ("--find-links", link)]
        self._uv("pip", "install", "--quiet", "--python", python, "--constraint", constraints, *links, *args,
                 what=what)

    def _create(self, spec: EnvSpec, path: Path) -> None:
        start = time.monotonic()
        files = spec.requirement_files()
        self._uv("venv", "--quiet", "--python", sys.executable, str(path), what="creating the environment")
        python = str(path / "bin" / "python")
        torch = spec.torch or self.torch
        with lifetime.owned_folder("graphbreak-doctor-env-") as tmp:
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text(f"torch=={torch}\n", encoding="utf-8")
            for name, text in files.items():
                (Path(tmp) / name).write_text(text, encoding="utf-8")
            if spec.torch:  # a file installed without dependencies: torch alone first
                alone = Path(tmp) / "torch.txt"
                alone.write_text(f"torch=={spec.torch}\n", encoding="utf-8")
                self._install_torch(python, spec.torch, Path(tmp) / "base.txt" if "base.txt" in files else alone)
            install = lambda *args, what: self._install(python, *args, what=what,  # noqa: E731
                                                        constraints=str(constraints))
            if "base.txt" in files:
                install("-r", str(Path(tmp) / "base.txt"), what=f"installing {spec.label}")
            if "nodeps.txt" in files:
                install("--no-deps", "-r", str(Path(tmp) / "nodeps.txt"), what=f"installing {spec.label}")
            followed: dict[str, str] = {}
            notes: list[str] = []
            if spec.framework:  # the release's own pins, as its framework follows them
                env = Installer(python, install, lambda *names, what: self._uv(
                    "pip", "uninstall", "--quiet", "--python", python, *names, what=what),
                    lambda *names: self._requires(python, spec, names))
                followed, notes = registry.get(spec.framework).follow_release(spec.release, files, env)
            try:
                doctor = self.doctor.install_args(Path(tmp))
            except doctor_source.SourceError as e:
                raise EnvError(str(e)) from None
            install("--no-deps", *doctor, what="installing graphbreak-doctor")
        manifest = {
            "framework": spec.framework, "release": spec.release, "flashinfer": spec.flashinfer, "torch": torch,
            "python": sys.version.split()[0], "doctor": self.doctor.identity(),
            "followed_release_pins": followed, "notes": notes,
            "requirements": files, "seconds": round(time.monotonic() - start, 1),
        }
        (path / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")

    @staticmethod
    def _requires(python: str, spec: EnvSpec, names: tuple[str, ...]) -> list:
        """Each distribution's requirement lines in the environment, then
        {name: version} of everything installed there."""
        code = ("import importlib.metadata as m, json, sys; "
                "print(json.dumps([m.requires(p) or [] for p in sys.argv[1:]] + "
                "[{d.metadata['Name']: d.version for d in m.distributions()}]))")
        out = subprocess.run([python, "-c", code, *names], check=False, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise EnvError(f"reading {spec.label}'s requirements: {one_line(out.stderr)}")
        return json.loads(out.stdout)

    def _install_torch(self, python: str, version: str, base: Path) -> None:
        """torch ``version`` and the base requirements (which pin it) into the
        environment, by this interpreter's pip with its own configuration:
        the local wheel folders and package indexes where builds of torch lie
        (a CPU build, or a CUDA build that runs on the CPU); uv reads none of
        them, and would download a CUDA build of several GB. One resolution
        for torch and the rest: the CUDA Python packages a CUDA build of torch
        brings must agree with those FlashInfer asks for."""
        if importlib.util.find_spec("pip") is None:
            raise EnvError(f"torch {version}: installing another torch than this interpreter's ({self.torch}) "
                           "needs pip here (it reads the configured wheel folders and indexes)")
        command = lifetime.command([sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
                                    "--disable-pip-version-check", "-r", str(base)])
        result = subprocess.run(command, check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            lines = [ln.strip() for ln in result.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
            raise EnvError(f"installing torch {version}: {one_line(' '.join(lines[-2:]) or 'pip failed')}")

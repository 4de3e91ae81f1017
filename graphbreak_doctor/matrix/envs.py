"""One isolated environment per (SGLang, FlashInfer) pair, built with uv and kept.

An environment starts from the pinned requirement files that ship with the
package (``matrix/requirements/``, package data; the Makefile installs the
same files): ``ci.txt`` without SGLang, else the pair of files of the SGLang
profile that fits the release (its pins, then its CUDA-only wheels with
``--no-deps``, as the Makefile installs them). The pair's versions replace
the files' SGLang and FlashInfer pins, the packages a release is picky about follow that release's
own pins (read from the installed release's metadata), torch is held at the
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
import re
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
from graphbreak_doctor.matrix import vllm_release
from graphbreak_doctor.matrix.pins import (EnvError, exact_pins, norm_name, of_its_time, pin,  # noqa: F401
                                           release_torch, version_key)
from graphbreak_doctor.text import one_line

# Package data (pyproject.toml): an installed doctor has them as a checkout does.
REQUIREMENTS = Path(__file__).resolve().parent / "requirements"
MANIFEST = "matrix-env.json"

# SGLang profiles: (first release, base requirement file, --no-deps file,
# CUDA-only packages installed --no-deps at the release's own pin where it has
# one). A release uses the newest profile whose first release is not newer
# than it. DeepGEMM: from 0.5.10 the releases pin sgl-deep-gemm (0.5.9 bundles
# DeepGEMM in sgl-kernel), and 0.5.12-0.5.21 call it on CUDA without a torch
# path (0.5.21 imports it at module level); its kernel library gets a
# stand-in. From 0.5.22 the doctor runs without it: those releases take their
# torch path for the indexer's MQA logits (forward.SETTINGS), and the stand-in
# does not cover the kernel library of the DeepGEMM they pin.
SGLANG_PROFILES = (
    ("0.5.9", "sglang-0.5.9.txt", "sglang-0.5.9-nodeps.txt", ("sgl-deep-gemm",)),
    ("0.5.22", "sglang.txt", "sglang-nodeps.txt", ()),
)
# Packages whose version follows the SGLang release's own == pin when that is
# newer than the profile's (installed with their dependencies): a release's
# model registry is written against its transformers (an older one lacks its
# configs, a newer one registers some of them itself). An older pin is not
# followed: the profile's is the first with GLM-5's config.
FOLLOW_RELEASE = ("transformers",)
# Packages held at the version of the release's time: its own == pin, or the
# lowest version its >= allows (a release without an upper bound was written
# against the version of its day, not today's), where the cell's FlashInfer
# accepts that version; else the lowest version the FlashInfer accepts (the two
# cannot agree: the cell runs the FlashInfer it is about). The CuTe DSL is
# one: the kernels a release ships in Python (sgl-kernel's FA4 among them) are
# written against the DSL of their day, and a newer one can fail to import them.
FOLLOW_TIME = ("nvidia-cutlass-dsl",)
# The kernel package (its Python wrappers; the binaries get stand-ins): a
# release's own pin replaces the profile's, whichever of the two names it has
# (the package was renamed; both install the ``sgl_kernel`` module). The
# wrappers and the fakes SGLang registers for them change together.
KERNEL_PACKAGES = ("sgl-kernel", "sglang-kernel")


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
    """What one environment holds: an SGLang release ("" for none), a
    FlashInfer release, a torch release ("" = the torch this interpreter
    runs), and a vLLM release ("" for none; never with SGLang:
    matrix/vllm_release.py)."""

    sglang: str
    flashinfer: str
    torch: str = ""
    vllm: str = ""

    @property
    def label(self) -> str:
        framework = f"sglang {self.sglang}, " if self.sglang else f"vllm {self.vllm}, " if self.vllm else ""
        return framework + f"flashinfer {self.flashinfer}" + (f", torch {self.torch}" if self.torch else "")

    def profile(self) -> tuple[str, str, tuple[str, ...]]:
        """The (base, --no-deps) requirement files this release starts from,
        and the CUDA-only packages that follow the release's own pin."""
        chosen = None
        for first, base, nodeps, cuda_only in SGLANG_PROFILES:
            if version_key(first) <= version_key(self.sglang):
                chosen = (base, nodeps, cuda_only)
        if chosen is None:
            first = SGLANG_PROFILES[0][0]
            raise EnvError(f"SGLang {self.sglang} predates {first}, the first release with GLM-5 "
                           "(GlmMoeDsaForCausalLM)")
        return chosen

    def requirement_files(self) -> dict[str, str]:
        """File name -> text, as installed (base first, then --no-deps)."""
        if self.vllm:
            lines = vllm_release.requirement_lines(_read(vllm_release.PROFILE), self.vllm, self.flashinfer, self.torch)
            return {"nodeps.txt": "\n".join(lines) + "\n"}
        if not self.sglang:
            return {"base.txt": "\n".join(self._torch(pin(_read("ci.txt"), "flashinfer-python", self.flashinfer)))
                    + "\n"}
        base, nodeps, _cuda_only = self.profile()
        return {
            "base.txt": "\n".join(self._torch(pin(_read(base), "flashinfer-python", self.flashinfer))) + "\n",
            "nodeps.txt": "\n".join(pin(_read(nodeps), "sglang", self.sglang)) + "\n",
        }

    def _torch(self, lines: list[str]) -> list[str]:
        """The files' torch pin, where there is one, at the environment's torch."""
        if not self.torch:
            return lines
        return [f"torch=={self.torch}" if re.match(r"\s*torch\s*==", line) else line for line in lines]

    def key(self, torch: str) -> str:
        text = json.dumps([sys.version, self.torch or torch, running_doctor().identity(), self.requirement_files(),
                           FOLLOW_RELEASE, KERNEL_PACKAGES, FOLLOW_TIME, self.profile()[2] if self.sglang else ()]
                          + ([vllm_release.RULES] if self.vllm else []))
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def folder_name(self, torch: str) -> str:
        what = f"sglang-{self.sglang}-" if self.sglang else f"vllm-{self.vllm}-" if self.vllm else "reference-"
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
            if spec.torch:  # vLLM's file goes in without dependencies: torch alone first
                alone = Path(tmp) / "torch.txt"
                alone.write_text(f"torch=={spec.torch}\n", encoding="utf-8")
                self._install_torch(python, spec.torch, Path(tmp) / "base.txt" if "base.txt" in files else alone)
            if "base.txt" in files:
                self._install(python, "-r", str(Path(tmp) / "base.txt"), what=f"installing {spec.label}",
                              constraints=str(constraints))
            followed: dict[str, str] = {}
            notes: list[str] = []
            if spec.vllm:  # one file, without dependencies; then the release's own versions
                self._install(python, "--no-deps", "-r", str(Path(tmp) / "nodeps.txt"),
                              what=f"installing vllm {spec.vllm}", constraints=str(constraints))
                followed, notes = vllm_release.follow(
                    python, spec.vllm, files["nodeps.txt"],
                    lambda *args, what: self._install(python, *args, what=what, constraints=str(constraints)))
            elif "nodeps.txt" in files:
                self._install(python, "--no-deps", "-r", str(Path(tmp) / "nodeps.txt"),
                              what=f"installing sglang {spec.sglang}", constraints=str(constraints))
                followed, notes = self._follow_release(python, spec, files["base.txt"], files["nodeps.txt"],
                                                str(constraints))
            try:
                doctor = self.doctor.install_args(Path(tmp))
            except doctor_source.SourceError as e:
                raise EnvError(str(e)) from None
            self._install(python, "--no-deps", *doctor, what="installing graphbreak-doctor",
                          constraints=str(constraints))
        manifest = {
            "sglang": spec.sglang, "vllm": spec.vllm, "flashinfer": spec.flashinfer, "torch": torch,
            "python": sys.version.split()[0], "doctor": self.doctor.identity(),
            "followed_release_pins": followed, "notes": notes,
            "requirements": files, "seconds": round(time.monotonic() - start, 1),
        }
        (path / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")

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

    def _follow_release(self, python: str, spec: EnvSpec, base: str, nodeps_text: str,
                        constraints: str) -> tuple[dict[str, str], list[str]]:
        """Install the release's own pins of FOLLOW_RELEASE where newer than
        the profile's, its kernel package's, the profile's CUDA-only
        packages', and FOLLOW_TIME's versions. Returns what was followed, and
        a note for each package that could not be held as the release asks."""
        code = ("import importlib.metadata as m, json; "
                "print(json.dumps([m.requires(p) or [] for p in ('sglang', 'flashinfer-python')] + "
                "[{d.metadata['Name']: d.version for d in m.distributions()}]))")
        out = subprocess.run([python, "-c", code], check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise EnvError(f"reading sglang {spec.sglang}'s requirements: {one_line(out.stderr)}")
        release_requires, flashinfer_requires, present = json.loads(out.stdout)
        release = exact_pins(release_requires)
        profile = exact_pins(base.splitlines())
        followed: dict[str, str] = {}
        notes: list[str] = []
        for name in FOLLOW_RELEASE:
            version, current = release.get(norm_name(name)), profile.get(norm_name(name))
            if not version or (current and version_key(version) <= version_key(current)):
                continue
            self._install(python, f"{name}=={version}", what=f"installing sglang {spec.sglang}'s {name} pin",
                          constraints=constraints)
            followed[name] = version
        nodeps = exact_pins(nodeps_text.splitlines())
        wanted = next(((k, release[k]) for k in KERNEL_PACKAGES if k in release), None)
        current = next(((k, nodeps[k]) for k in KERNEL_PACKAGES if k in nodeps), None)
        if wanted and wanted != current:
            if current:
                self._uv("pip", "uninstall", "--quiet", "--python", python, current[0],
                         what=f"removing the profile's {current[0]}")
            self._install(python, "--no-deps", f"{wanted[0]}=={wanted[1]}",
                          what=f"installing sglang {spec.sglang}'s {wanted[0]} pin", constraints=constraints)
            followed[wanted[0]] = wanted[1]
        for name in spec.profile()[2]:
            version = release.get(norm_name(name))
            if version:
                self._install(python, "--no-deps", f"{name}=={version}",
                              what=f"installing sglang {spec.sglang}'s {name} pin", constraints=constraints)
                followed[name] = version
        installed_versions = {norm_name(k): v for k, v in present.items()}
        for name in FOLLOW_TIME:
            chosen = of_its_time(name, release_requires, flashinfer_requires)
            if chosen is None:
                continue
            version, extras, conflict = chosen
            if conflict:
                notes.append(f"{name} {version}: {conflict}")
            if installed_versions.get(norm_name(name)) == version:
                continue
            # The package and its companions (the DSL's libraries come as
            # packages of their own in later versions): out, then the version chosen.
            old = sorted(k for k in installed_versions if k == norm_name(name) or k.startswith(f"{norm_name(name)}-"))
            self._uv("pip", "uninstall", "--quiet", "--python", python, *old, what=f"removing {name}")
            self._install(python, f"{name}{extras}=={version}", what=f"installing {name} {version}",
                          constraints=constraints)
            followed[name] = version
        return followed, notes

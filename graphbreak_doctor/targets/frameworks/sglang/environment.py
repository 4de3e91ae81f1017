"""An SGLang release's environment (a matrix cell of ``--sglang``).

It starts from the pair of requirement files of the SGLang profile that fits
the release (package data of the matrix: the profile's pins, then its
CUDA-only wheels installed ``--no-deps``, as the Makefile installs them).
The cell's SGLang and FlashInfer replace the files' pins, and torch is held
at the cell's. Once the release is installed, the packages it is picky about
follow its own pins, read from its installed metadata.
"""

from __future__ import annotations

from graphbreak_doctor.targets.frameworks.environment import (
    EnvError,
    Installer,
    Recipe,
    base_recipe,
    exact_pins,
    norm_name,
    of_its_time,
    pin,
    version_key,
)

# SGLang profiles: (first release, base requirement file, --no-deps file,
# CUDA-only packages installed --no-deps at the release's own pin where it has
# one). A release uses the newest profile whose first release is not newer
# than it. DeepGEMM: from 0.5.10 the releases pin sgl-deep-gemm (0.5.9 bundles
# DeepGEMM in sgl-kernel), and 0.5.12-0.5.21 call it on CUDA without a torch
# path (0.5.21 imports it at module level); its kernel library gets a
# stand-in (deep_gemm_libs.py), a tvm-ffi module up to the DeepGEMM 0.5.21
# pins and a torch op library again in 0.2.3, which 0.5.23 pins. FlashMLA:
# from 0.5.22 the profile installs sgl-flash-mla, which SGLang's DSA
# attention calls on Hopper (its op libraries get a stand-in,
# flash_mla_libs.py). A release that pins another version of either gets its
# own.
SGLANG_PROFILES = (
    ("0.5.9", "sglang-0.5.9.txt", "sglang-0.5.9-nodeps.txt", ("sgl-deep-gemm",)),
    ("0.5.22", "sglang.txt", "sglang-nodeps.txt", ("sgl-flash-mla", "sgl-deep-gemm")),
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


def profile(release: str) -> tuple[str, str, tuple[str, ...]]:
    """The (base, --no-deps) requirement files ``release`` starts from, and
    the CUDA-only packages that follow the release's own pin."""
    chosen = None
    for first, base, nodeps, cuda_only in SGLANG_PROFILES:
        if version_key(first) <= version_key(release):
            chosen = (base, nodeps, cuda_only)
    if chosen is None:
        first = SGLANG_PROFILES[0][0]
        raise EnvError(f"SGLang {release} predates {first}, the first release with GLM-5 (GlmMoeDsaForCausalLM)")
    return chosen


def recipe(release: str, flashinfer: str, torch: str, read) -> Recipe:
    base, nodeps, cuda_only = profile(release)
    return Recipe({"base.txt": "\n".join(base_recipe(read, flashinfer, torch, base)) + "\n",
                   "nodeps.txt": "\n".join(pin(read(nodeps), "sglang", release)) + "\n"},
                  rules=(FOLLOW_RELEASE, KERNEL_PACKAGES, FOLLOW_TIME, cuda_only))


def follow(release: str, files: dict[str, str], env: Installer) -> tuple[dict[str, str], list[str]]:
    """Install the release's own pins of FOLLOW_RELEASE where newer than
    the profile's, its kernel package's, the profile's CUDA-only
    packages', and FOLLOW_TIME's versions. Returns what was followed, and
    a note for each package that could not be held as the release asks."""
    release_requires, flashinfer_requires, present = env.requires("sglang", "flashinfer-python")
    ours = exact_pins(release_requires)
    profile_pins = exact_pins(files["base.txt"].splitlines())
    followed: dict[str, str] = {}
    notes: list[str] = []
    for name in FOLLOW_RELEASE:
        version, current = ours.get(norm_name(name)), profile_pins.get(norm_name(name))
        if not version or (current and version_key(version) <= version_key(current)):
            continue
        env.install(f"{name}=={version}", what=f"installing sglang {release}'s {name} pin")
        followed[name] = version
    nodeps = exact_pins(files["nodeps.txt"].splitlines())
    wanted = next(((k, ours[k]) for k in KERNEL_PACKAGES if k in ours), None)
    current = next(((k, nodeps[k]) for k in KERNEL_PACKAGES if k in nodeps), None)
    if wanted and wanted != current:
        if current:
            env.uninstall(current[0], what=f"removing the profile's {current[0]}")
        env.install("--no-deps", f"{wanted[0]}=={wanted[1]}", what=f"installing sglang {release}'s {wanted[0]} pin")
        followed[wanted[0]] = wanted[1]
    for name in profile(release)[2]:
        version = ours.get(norm_name(name))
        if version:
            env.install("--no-deps", f"{name}=={version}", what=f"installing sglang {release}'s {name} pin")
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
        env.uninstall(*old, what=f"removing {name}")
        env.install(f"{name}{extras}=={version}", what=f"installing {name} {version}")
        followed[name] = version
    return followed, notes

"""A dry artifact repository for the files FlashInfer fetches from NVIDIA's.

Some modules fetch files from NVIDIA's artifact repository while their JIT
spec is generated (flashinfer/jit/fused_moe.py
gen_trtllm_gen_fused_moe_sm100_module: the batched-GEMM `checksums.txt`,
`flashinferMetaInfo.h` and the export headers, through
jit/cubin_loader.py get_artifact -> load_cubin -> download_file). There is no
network here, and the build that would use the files is dry anyway.

FlashInfer reads the repository location from FLASHINFER_CUBINS_REPOSITORY
and accepts a local directory (download_file's "local file copy" branch).
The emulation serves a dry repository: files with the names FlashInfer asks
for, a `checksums.txt` that lists their real sha256, and the pinned hash of
that `checksums.txt` (artifacts.CheckSumHash) set to match it -- what the
real repository at the pinned revision provides. The local artifact cache
(FLASHINFER_CUBIN_DIR) starts empty, so every fetch runs FlashInfer's whole
Python path (cache miss, file lock, copy, sha256 verification) and is
recorded as a "download" JIT request (recorder.py). Kernel cubins are
fetched by the compiled library at launch (cubin_loader.setup_cubin_loader);
launches are dry, so none are.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any, Optional

from graphbreak_doctor.emulation.presets import cubin_archs
from graphbreak_doctor.patching import UndoLog


@dataclasses.dataclass
class MirrorState:
    """The dry repositories of active emulations, added and removed through
    their undo logs."""

    mirrors: list[str] = dataclasses.field(default_factory=list)


STATE = MirrorState()


def mirrored_name(src: str) -> Optional[str]:
    """The name FlashInfer fetched, if `src` is a file of an active dry
    repository; else None."""
    for mirror in STATE.mirrors:
        if src.startswith(mirror):
            return src[len(mirror):].lstrip("/")
    return None


def _dry_metainfo() -> str:
    """A kernel manifest with one (empty) entry per cubin architecture.

    flashinfer/jit/trtllm_gen_metainfo.py filter_metainfo parses the manifest
    (0.7+) and refuses one without a kernel list or without an entry for the
    module's architecture family; the layout below is the one it parses.
    Releases that name their cubin architectures there are taken at their
    word; for the others the device presets say.
    """
    archs = list(cubin_archs())
    meta = sys.modules.get("flashinfer.jit.trtllm_gen_metainfo")
    if meta is not None:
        archs = list(
            dict.fromkeys(
                list(getattr(meta, "BLACKWELL_CUBIN_ARCHS", ())) + list(getattr(meta, "RUBIN_CUBIN_ARCHS", ()))
            )
        ) or archs
    lines = [
        "// graphbreak-doctor dry artifact: an empty batched-GEMM kernel manifest",
        "#pragma once",
        f"static constexpr size_t tllmGenBatchedGemmListLen = {len(archs)};",
        "static const batchedGemm::BatchedGemmConfig tllmGenBatchedGemmList[] = {",
    ]
    for arch in archs:
        lines += ["{nullptr, 0, 0, 0,", f" }}, gemm::SmVersion::{arch}}},"]
    lines += ["};", ""]
    return "\n".join(lines)


def _bmm_files(fused_moe_jit: Any) -> dict[str, bytes]:
    headers = list(getattr(fused_moe_jit, "BMM_EXPORT_HEADERS", []) or [])
    files = {"include/flashinferMetaInfo.h": _dry_metainfo().encode()}
    for header in headers:
        files[f"include/trtllmGen_bmm_export/{header}"] = (
            f"// graphbreak-doctor dry artifact: {header}\n".encode()
        )
    return files


def _write_checksummed(directory: Path, files: dict[str, bytes]) -> str:
    import hashlib

    lines = []
    for rel, data in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {rel}")
    checksums = ("\n".join(lines) + "\n").encode()
    (directory / "checksums.txt").write_bytes(checksums)
    return hashlib.sha256(checksums).hexdigest()


def install_artifact_mirror(root: Path, log: UndoLog) -> None:
    """Serve the dry repository from `root` until `log` is undone."""
    try:
        artifacts = importlib.import_module("flashinfer.artifacts")
        cubin_loader = importlib.import_module("flashinfer.jit.cubin_loader")
        fused_moe_jit = importlib.import_module("flashinfer.jit.fused_moe")
    except ImportError:
        return
    paths = getattr(artifacts, "ArtifactPath", None)
    hashes = getattr(artifacts, "CheckSumHash", None)
    if paths is None or hashes is None or not hasattr(paths, "TRTLLM_GEN_BMM"):
        return
    mirror = root / "artifacts"
    cache = root / "cubins"
    cache.mkdir(parents=True, exist_ok=True)
    bmm_sha = _write_checksummed(mirror / paths.TRTLLM_GEN_BMM, _bmm_files(fused_moe_jit))
    log.setattr(hashes, "TRTLLM_GEN_BMM", bmm_sha)
    if hasattr(paths, "TRTLLM_GEN_FMHA") and hasattr(hashes, "TRTLLM_GEN_FMHA"):
        # TensorRT-LLM's attention kernels (trtllm-gen FMHA, MLA decode):
        # the module is built against one header of the release, never parsed
        # in Python; a dry build only needs it to exist.
        fmha = {"include/flashInferMetaInfo.h": b"// graphbreak-doctor dry artifact: FMHA kernel manifest\n"}
        log.setattr(hashes, "TRTLLM_GEN_FMHA", _write_checksummed(mirror / paths.TRTLLM_GEN_FMHA, fmha))

    repository = str(mirror) + "/"
    real_repository = cubin_loader.FLASHINFER_CUBINS_REPOSITORY
    real_cache = sys.modules["flashinfer.jit.env"].FLASHINFER_CUBIN_DIR
    # Both are module constants computed at import and imported by name.
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "flashinfer" or mod_name.startswith("flashinfer.")):
            continue
        if vars(mod).get("FLASHINFER_CUBINS_REPOSITORY") == real_repository:
            log.setattr(mod, "FLASHINFER_CUBINS_REPOSITORY", repository)
        if vars(mod).get("FLASHINFER_CUBIN_DIR") == real_cache:
            log.setattr(mod, "FLASHINFER_CUBIN_DIR", cache)
    log.setenv("FLASHINFER_CUBINS_REPOSITORY", repository)
    log.setenv("FLASHINFER_CUBIN_DIR", str(cache))
    STATE.mirrors.append(str(mirror))
    log.call_on_undo(lambda: STATE.mirrors.remove(str(mirror)))

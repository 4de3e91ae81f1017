"""FlashInfer's host-side planner compiled for this machine (emulation/host_build.py):
the SM120 sparse MLA module's C++ planner, built with the host compiler from
FlashInfer's own sources, answering on fake CUDA tensors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphbreak_doctor.emulation import host_build

# Both FlashInfer environments (0.6.3 has no SM120 sparse MLA module: skipped
# there). The SGLang environment has the main one's FlashInfer and torch; its
# decode traces on sm120 build the same planner (tests/test_sglang_stack.py).
pytestmark = [pytest.mark.flashinfer_version]

ROOT = Path(__file__).resolve().parents[1]
PLANNER = {"inspect_metadata", "resolve_format", "format_info", "metadata_candidates", "resolve_attention",
           "decode_scratch_heads", "candidates"}
LAUNCHERS = {"execute_attention", "sparse_mla_sm120_paged_attention"}


def _spec():
    pytest.importorskip("flashinfer")
    try:
        from flashinfer.jit.mla import gen_sparse_mla_sm120_module
    except ImportError:
        pytest.skip("this FlashInfer has no SM120 sparse MLA module")
    if host_build.compiler() is None or host_build.cuda_host_headers() is None:
        pytest.skip("no C++ compiler or no CUDA host headers here")
    from graphbreak_doctor.emulation import EmulatedDevice

    with EmulatedDevice("sm120"):  # the module is generated for an SM12x target
        return gen_sparse_mla_sm120_module()


def _build(cache: Path):
    from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation

    spec = _spec()
    old = os.environ.get("GRAPHBREAK_DOCTOR_CACHE")
    os.environ["GRAPHBREAK_DOCTOR_CACHE"] = str(cache)
    try:
        return flashinfer_emulation.build_host_library(spec.name, list(spec.sources))
    finally:
        if old is None:
            del os.environ["GRAPHBREAK_DOCTOR_CACHE"]
        else:
            os.environ["GRAPHBREAK_DOCTOR_CACHE"] = old


@pytest.fixture(scope="session")
def host_cache() -> Path:
    """The doctor's own cache folder, as every trace of the test run uses it:
    the planner is built once (minutes) in a run, by whichever comes first --
    the ``built`` fixture or an SM120 trace of SGLang's layers -- and found
    there by the rest (a build runs in a folder of its own and is renamed into
    place, so two processes building at once leave one library)."""
    from graphbreak_doctor.cache import cache_root

    return cache_root()


@pytest.fixture(scope="module")
def built(host_cache):
    return host_cache, _build(host_cache)


@pytest.mark.slow
def test_the_planner_builds_and_the_kernel_launchers_stay_out(built):
    _, library = built
    assert not library.unavailable
    assert PLANNER <= set(library.exports), library.left_out
    for launcher in LAUNCHERS:
        assert launcher not in library.exports
        assert "undefined reference" in library.left_out[launcher], library.left_out[launcher]
    # Sources with device code are left out with the compiler's reason.
    assert any("dispatch" in source for source in library.left_out)


@pytest.mark.slow
def test_the_compiled_planner_agrees_with_flashinfers_python_mirror(built):
    """FlashInfer keeps Python copies of a few kernel constants; the compiled
    C++ must give the same numbers, and tell GLM-5's cache format from
    DeepSeek-V3.2's by the scale format alone."""
    import tvm_ffi
    from flashinfer.mla._sparse_mla_sm120 import _policy

    _, library = built
    module = tvm_ffi.load_module(str(library.path))
    assert module.resolve_format(576, "arbitrary_fp32") == _policy._MODEL_TYPE_GLM_NSA
    assert module.resolve_format(576, "auto") == _policy._MODEL_TYPE_DSV3_2
    info = dict(module.format_info(_policy._MODEL_TYPE_GLM_NSA))
    assert (info["value_dim"], info["chunk_width"], info["max_heads"]) == (_policy._D_V, _policy._BI,
                                                                             _policy._DECODE_MAX_HEADS)
    assert info["bytes_per_token"] == 656  # 512 FP8 + 4 fp32 scales + 64 bf16 rope
    with pytest.raises(Exception, match="unsupported d_qk"):
        module.resolve_format(100, "auto")


@pytest.mark.slow
def test_a_second_build_is_the_cached_library(built):
    cache, library = built
    folder = library.path.parent
    assert folder.parent == cache / "host-build"
    stamp = (library.path.stat().st_mtime_ns, sorted(p.name for p in folder.iterdir()))
    again = _build(cache)
    assert again.path == library.path and again.exports == library.exports
    assert (library.path.stat().st_mtime_ns, sorted(p.name for p in folder.iterdir())) == stamp


def test_without_a_compiler_it_says_why_and_writes_nothing(tmp_path, monkeypatch):
    spec = _spec()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("GRAPHBREAK_DOCTOR_CACHE", str(tmp_path / "cache"))
    library = host_build.compile_library(spec.name, list(spec.sources), [])
    assert library.path is None and "no C++ compiler" in library.unavailable
    assert not (tmp_path / "cache").exists()


_EAGER = """
import json, sys, torch
from graphbreak_doctor.emulation import EmulatedDevice
from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation
import fixtures.flashinfer_targets as targets
out = {}
with EmulatedDevice("sm120") as dev:
    for name in ("sparse_mla_decode_glm5", "sparse_mla_decode_dsv32"):
        fn, args = getattr(targets, name)()
        try:
            fn(*args)
        except Exception as e:
            out[name] = {"error": flashinfer_emulation.unanswered_planner(e) or repr(e)}
            continue
        from flashinfer.mla._sparse_mla_sm120 import _prepared
        (key, call), = [(k, v) for k, v in _prepared._functional_plans.items() if k[0] not in out.get("models", [])]
        out.setdefault("models", []).append(key[0])
        out[name] = {"model": key[0], "inspect": dict(call.plan.inspect()),
                     "workspace": [[list(s), str(d), n, a] for s, d, n, a in call.workspace]}
    out["device"] = dev.describe()
print(json.dumps(out))
"""


def _eager(env: dict | None = None) -> dict:
    _spec()
    result = subprocess.run([sys.executable, "-c", _EAGER], cwd=ROOT, capture_output=True, text=True, check=False,
                            env={**os.environ, **(env or {})}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_flashinfer_plans_sparse_mla_on_an_emulated_sm120(built):
    """FlashInfer's public MLA decode with a sparse top-k, as SGLang calls it
    for GLM-5 and with DeepSeek-V3.2's cache format: the planner runs for real
    and the plan is the one FlashInfer's resolver gives a 16-token decode (the
    planner the ``built`` fixture compiled, found in its cache folder)."""
    cache, library = built
    assert not library.unavailable, library.unavailable
    out = _eager({"GRAPHBREAK_DOCTOR_CACHE": str(cache)})
    tokens, heads, topk = 16, 64, 2048
    for name, model in (("sparse_mla_decode_glm5", 2), ("sparse_mla_decode_dsv32", 0)):
        plan = out[name]
        assert "error" not in plan, plan
        assert plan["model"] == model
        assert plan["inspect"]["variant"] == 0  # the decode kernel: at most 64 tokens
        chunks = topk // 64
        assert plan["inspect"]["scratch_split_stride"] == chunks
        assert plan["inspect"]["scratch_heads"] == heads
        partial, lse, result = plan["workspace"]
        assert partial[:3] == [[tokens * heads * chunks * 512], "torch.bfloat16", tokens * heads * chunks * 1024]
        assert lse[:3] == [[tokens * heads * chunks], "torch.float32", tokens * heads * chunks * 4]
        assert result[:2] == [[tokens, heads], "torch.float32"]
        assert plan["inspect"]["shared_bytes"] <= 99 * 1024  # it fits the emulated RTX PRO 6000
    assert "resolve_attention" in out["device"]["flashinfer_host_code"]["sparse_mla_sm120"]


@pytest.mark.slow
def test_without_a_compiler_the_planner_failure_says_why(tmp_path):
    out = _eager({"PATH": str(tmp_path), "CXX": "", "GRAPHBREAK_DOCTOR_CACHE": str(tmp_path / "cache")})
    why = out["sparse_mla_decode_glm5"]["error"]
    assert "SM120 sparse MLA plans each call on the host" in why and "no C++ compiler" in why, why
    assert out["device"]["flashinfer_host_code"]["sparse_mla_sm120"].startswith("not built")

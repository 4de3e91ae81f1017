"""FlashMLA from the sgl-flash-mla wheel (SGLang's own requirement, what its
DSA attention calls on Hopper): the wheel's op libraries do not load without
a CUDA build of torch, so each is stood in by the schemas its bytes declare
(targets/frameworks/sglang/flash_mla_libs.py), and the wheel's own Python,
and SGLang's wrapper over it, run on top on the emulated GPU. Runs in the
SGLang environment (`make test-sglang`)."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import run_script

HAS_FLASH_MLA = importlib.util.find_spec("flash_mla") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_FLASH_MLA, reason="sgl-flash-mla is not installed")]

# In a fresh interpreter: the wheel's module, once imported, keeps what its
# loader found.
_CALLS = r"""
import json, torch
from graphbreak_doctor.diagnose import inside_device
from graphbreak_doctor.targets.frameworks import registry

def shapes(values):
    return [None if t is None else [list(t.shape), str(t.dtype).split(".")[-1], t.device.type] for t in values]

with inside_device("sm90") as (dev, log):
    installed = registry.install_stand_ins(log)
    import flash_mla
    from sglang.kernels.ops.attention import flash_mla_interface as sgl
    record = {"lines": [line for line in installed.lines if line.startswith("flash_mla")],
              "legacy": flash_mla.has_legacy()}
    q = torch.empty(128, 64, 576, dtype=torch.bfloat16, device="cuda")
    kv = torch.empty(256, 1, 576, dtype=torch.bfloat16, device="cuda")
    indices = torch.empty(128, 1, 2048, dtype=torch.int32, device="cuda")
    record["prefill"] = shapes(sgl.flash_mla_sparse_fwd(q, kv, indices, 0.1, 512))
    record["prefill_current"] = shapes(flash_mla.flash_mla_sparse_fwd(q, kv, indices, 0.1, 512,
                                                                      return_log2_lse=False))
    schedule, _ = sgl.get_mla_metadata()
    q = torch.empty(16, 1, 64, 576, dtype=torch.bfloat16, device="cuda")
    cache = torch.empty(64, 64, 1, 656, dtype=torch.uint8, device="cuda")
    indices = torch.empty(16, 1, 2048, dtype=torch.int32, device="cuda")
    record["decode"] = shapes(sgl.flash_mla_with_kvcache(q, cache, None, None, 512, schedule, indices=indices,
                                                         is_fp8_kvcache=True))
    record["schedule"] = shapes([schedule.tile_scheduler_metadata, schedule.num_splits])
    try:
        torch.ops.flash_mla_legacy.permute_q_b_proj(q, q, 64, 576)
    except Exception as e:
        record["no_kernel"] = f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps(record))
print("AFTER " + json.dumps(hasattr(torch.ops.flash_mla_legacy, "sparse_prefill_fwd")))
"""


def test_the_wheels_own_python_runs_on_its_stood_in_libraries():
    result, lines = run_script(_CALLS)
    assert result.returncode == 0 and "RESULT" in lines, result.stderr[-3000:]
    record = lines["RESULT"]
    # Both libraries, each in the namespace the wheel's loader calls, its load skipped.
    assert len(record["lines"]) == 2 and record["legacy"] is True, record["lines"]
    assert any("flash_mla_legacy::{" in line and "sparse_prefill_fwd" in line for line in record["lines"])
    # The shapes the wheel's docstrings give: the legacy sparse prefill SGLang calls on Hopper, ...
    assert record["prefill"] == [[[128, 64, 512], "bfloat16", "cuda"], [[128, 64], "float32", "cuda"],
                                 [[128, 64], "float32", "cuda"]]
    assert record["prefill_current"] == [[[128, 64, 512], "bfloat16", "cuda"], None, None]
    # ... and the sparse decode, which fills the caller's empty schedule on its first call (132 SMs).
    assert record["decode"] == [[[16, 1, 64, 512], "bfloat16", "cuda"], [[16, 64, 1], "float32", "cuda"]]
    assert record["schedule"] == [[[132, 8], "int32", "cuda"], [[17], "int32", "cuda"]]
    # An op that returns tensors and has no dry answer is declared but has no kernel: a call names it.
    assert "permute_q_b_proj" in record["no_kernel"]
    # Undone with the trace: the declarations are gone.
    assert lines["AFTER"] is False

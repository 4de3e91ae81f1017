"""DeepGEMM from the sgl-deep-gemm wheel (SGLang's own requirement, whose
MQA-logits kernels its DSA indexer calls): the wheel's op library
(``deep_gemm/_C.so``, a torch op library its package loads by path) does not
load without a CUDA build of torch, so it is stood in by the schemas its
bytes declare (targets/frameworks/sglang/deep_gemm_libs.py), and the
package's own Python runs on top on the emulated GPU. Runs in the SGLang
environment (`make test-sglang`)."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import run_script

HAS_DEEP_GEMM = importlib.util.find_spec("deep_gemm") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_DEEP_GEMM, reason="sgl-deep-gemm is not installed")]

# In a fresh interpreter: the package, once imported, keeps what its loader found.
_CALLS = r"""
import json, torch
from graphbreak_doctor.diagnose import inside_device
from graphbreak_doctor.targets.frameworks import registry

def shape(t):
    return [list(t.shape), str(t.dtype).split(".")[-1], t.device.type]

with inside_device("sm120") as (dev, log):
    installed = registry.install_stand_ins(log)
    import deep_gemm
    record = {"lines": [line for line in installed.lines if line.startswith("deep_gemm")],
              "sms": deep_gemm.get_num_sms(),
              "device_sms": torch.cuda.get_device_properties(0).multi_processor_count}
    # The indexer's prefill: 128 query tokens over 4096 keys, 64 heads of 128.
    q = torch.empty(128, 64, 128, dtype=torch.float8_e4m3fn, device="cuda")
    kv = torch.empty(4096, 128, dtype=torch.float8_e4m3fn, device="cuda")
    sf = torch.empty(4096, dtype=torch.float32, device="cuda")
    weights = torch.empty(128, 64, dtype=torch.float32, device="cuda")
    ks = torch.empty(128, dtype=torch.int32, device="cuda")
    record["prefill"] = shape(deep_gemm.fp8_mqa_logits(q, (kv, sf), weights, ks, ks, clean_logits=False))
    # The decode: 16 requests, one token each, paged keys up to 4096.
    lens = torch.empty(16, 1, dtype=torch.int32, device="cuda")
    schedule = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, record["sms"])
    record["schedule"] = shape(schedule)
    q = torch.empty(16, 1, 64, 128, dtype=torch.float8_e4m3fn, device="cuda")
    cache = torch.empty(64, 64, 1, 132, dtype=torch.uint8, device="cuda")
    blocks = torch.empty(16, 64, dtype=torch.int32, device="cuda")
    record["decode"] = shape(deep_gemm.fp8_paged_mqa_logits(q, cache, weights[:16], lens, blocks, schedule, 4096))
    # A 7168 x 7168 FP8 weight's 128 x 128 block scales, as its GEMMs want them on SM120:
    # one row of scales per output row, packed four to an int32, MN-major.
    blocks = torch.empty(56, 56, dtype=torch.float32, device="cuda")
    packed = deep_gemm.transform_sf_into_required_layout(blocks, 7168, 7168, (1, 128, 128), is_sfa=False)
    record["weight_scales"] = shape(packed) + [list(packed.stride())]
    try:
        deep_gemm.get_mqa_logits_metadata(ks, ks, 4096, 64)
    except Exception as e:
        record["no_kernel"] = f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps(record))
print("AFTER " + json.dumps(hasattr(torch.ops.deep_gemm, "fp8_mqa_logits")))
"""


def test_the_packages_own_python_runs_on_its_stood_in_library():
    result, lines = run_script(_CALLS)
    assert result.returncode == 0 and "RESULT" in lines, result.stderr[-3000:]
    record = lines["RESULT"]
    # The library's own schemas, its load by path skipped; the SM count the device's.
    assert len(record["lines"]) == 1 and "deep_gemm::{" in record["lines"][0] and "_C.so" in record["lines"][0]
    assert record["sms"] == record["device_sms"] == 188  # the RTX PRO 6000 Blackwell Server Edition's
    # The shapes of the kernels' outputs: logits of every query token over every key, ...
    assert record["prefill"] == [[128, 4096], "float32", "cuda"]
    # ... the paged scheduler's (start, end) per SM and one more, and the paged
    # logits of each request's token up to the longest context.
    assert record["schedule"] == [[189, 2], "int32", "cuda"]
    assert record["decode"] == [[16, 4096], "float32", "cuda"]
    assert record["weight_scales"] == [[7168, 14], "int32", "cuda", [1, 7168]]
    # An op that returns a tensor and has no dry answer is declared but has no kernel: a call names it.
    assert "get_mqa_logits_metadata" in record["no_kernel"]
    # Undone with the trace: the declarations are gone.
    assert lines["AFTER"] is False

"""The serving frameworks behind one interface (targets/frameworks/): the
registry finds the built-in ones by walking the package, answers for a
selection, a launch and a name, and each framework reads its own launch
facts (the sizes its server compiles at, its words about the launch)."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import ROOT
from graphbreak_doctor.targets.frameworks import registry
from graphbreak_doctor.targets.frameworks.framework import Framework
from graphbreak_doctor.targets.serving import PROVIDER


def test_the_built_in_frameworks_are_found_by_walking_the_package():
    folders = sorted(p.name for p in (ROOT / "graphbreak_doctor" / "targets" / "frameworks").iterdir()
                     if (p / "framework.py").exists())
    assert [f.name for f in registry.BUILTIN] == folders == ["sglang", "vllm"]
    assert all(isinstance(f, Framework) and f.title and f.phases for f in registry.FRAMEWORKS)
    assert [o.flag for o in PROVIDER.options if o.flag.endswith("-args")] == ["--sglang-args", "--vllm-args"]


def test_an_unknown_framework_is_one_line_naming_the_known_ones():
    with pytest.raises(ValueError) as e:
        registry.get("trtllm")
    assert str(e.value) == "no serving framework 'trtllm' (known: sglang, vllm)"


def test_a_selection_and_a_launch_name_their_framework():
    (sglang,) = PROVIDER.served_selections("dense", "sglang")
    (reference,) = PROVIDER.served_selections("dense", "reference")
    vllm = PROVIDER.model_selection("vllm", "qwen3-30b-a3b", ())
    assert registry.of(sglang.options).name == "sglang" and registry.of(vllm.options).name == "vllm"
    assert registry.of(reference.options) is None
    # Launch facts written before frameworks named themselves there are SGLang's.
    assert registry.of_launch({"resolved": {}, "sglang_said": []}).name == "sglang"
    assert registry.of_launch({"framework": "vllm", "said": []}).name == "vllm"
    assert registry.of_launch({"framework": "gone"}) is None and registry.of_launch({}) is None


def test_sglang_reads_its_sizes_and_words_from_its_resolved_launch():
    sglang = registry.get("sglang")
    prefill = {"phases": {"extend": "tc_piecewise: torch.compile (fullgraph)"},
               "resolved": {"piecewise_cuda_graph_tokens": [4, 8, 16]}}
    assert sglang.server_sizes(prefill, "extend") == (
        [4, 8, 16], "SGLang's prefill capture sizes (the resolved launch arguments' piecewise_cuda_graph_tokens)")
    decode = {"resolved": {"enable_torch_compile": True, "torch_compile_max_bs": 8, "cuda_graph_bs": [1, 4, 8, 16]}}
    sizes, said = sglang.server_sizes(decode, "decode")
    assert sizes == [1, 4, 8] and "torch_compile_max_bs" in said
    assert sglang.server_sizes({"resolved": {}}, "extend") == ([], "")
    assert sglang.said_lines({"sglang_said": ["piecewise off"], "sglang_rules": ["x = 1"]}) == [
        "SGLang said: piecewise off", "SGLang's rule: x = 1"]
    assert sglang.sizes_to_prove([1, 2, 4, 8, 16]) == [1, 4, 16]
    # A launch that compiles the prefill on a path of its own (piecewise on): the matrix traces it apart.
    assert sglang.compiles_prefill_apart({"resolved": {"enable_piecewise_cuda_graph": True}})
    assert not sglang.compiles_prefill_apart({"resolved": {"disable_piecewise_cuda_graph": True}})
    assert not sglang.compiles_prefill_apart({"resolved": "hostile"})


def test_vllm_reads_its_sizes_and_words_from_its_resolved_launch():
    vllm = registry.get("vllm")
    launch = {"framework": "vllm", "said": ["compiling"],
              "resolved": {"mode": "VLLM_COMPILE", "compile_ranges": ["[1, 8192]"],
                           "cudagraph_capture_sizes": [1, 2, 4, 8, 512]}}
    assert vllm.server_sizes(launch, "profile")[0] == [1, 4, 512, 8192]
    assert vllm.server_sizes({"resolved": {"mode": "NONE"}}, "profile") == ([], "")
    assert vllm.said_lines(launch) == ["vLLM said: compiling"]
    assert vllm.sizes_to_prove([8, 1, 8]) == [1, 8]
    assert not vllm.compiles_prefill_apart(launch)  # its map traces the compiled forward itself
    assert vllm.split_launch("qwen3-30b-a3b --max-num-seqs 8", None) == (("--max-num-seqs", "8"), "qwen3-30b-a3b")


def test_findings_name_the_installed_frameworks_and_sglang_always():
    found = registry.releases()
    assert "sglang" in found and bool(found["sglang"]) == (importlib.util.find_spec("sglang") is not None)
    assert ("vllm" in found) == (importlib.util.find_spec("vllm") is not None)

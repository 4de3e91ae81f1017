"""--vllm-args given badly: one line, exit 2, nothing written, before any
framework is imported (runs in every environment)."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import run_cli


@pytest.mark.parametrize("args, said", [
    (["--vllm-args", "--max-num-seqs 8", "--sglang-args", "--tp 1"], "launch two frameworks: give one"),
    (["--vllm-args", "'unbalanced"], "--vllm-args: No closing quotation"),
    (["--vllm-args", ""], "--vllm-args is empty"),
    (["--vllm-args", "--model"], "--model needs a value"),
    (["--vllm-args", "--max-num-seqs 8", "--layer", "dense"], "leave out --layer"),
    (["--vllm-args", "qwen3-30b-a3b", "--config", "x"], "names a model and --config names another"),
])
def test_bad_vllm_args(tmp_path, args, said):
    out = tmp_path / "f.json"
    done = run_cli("trace", *args, "--json", str(out), cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and said in lines[0], lines
    assert not out.exists() and not (tmp_path / "reports").exists()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_args_without_vllm(tmp_path):
    done = run_cli("trace", "--vllm-args", "--max-num-seqs 8", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == ("graphbreak-doctor: error: --vllm-args needs vLLM installed: vLLM itself reads "
                                   "them (see docs/vllm.md)")

"""Does it fit (targets/fit.py) on a small model built here: the weights of
the whole depth from one built layer of each kind, a tied weight counted
once, and the verdict at a static memory fraction."""

from __future__ import annotations

import pytest
import torch

from graphbreak_doctor.targets import fit, shards


class Layer(torch.nn.Module):
    def __init__(self, moe: bool) -> None:
        super().__init__()
        self.mlp = torch.nn.Module()
        self.mlp.proj = torch.nn.Linear(8, 8, bias=False)  # 64 bf16 values: 128 bytes
        if moe:
            self.mlp.experts = torch.nn.Parameter(torch.zeros(4, 8, 8))  # 256 fp32 values: 1024 bytes


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)  # 128 fp32 values: 512 bytes
        self.layers = torch.nn.ModuleList([Layer(False), Layer(True)])
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight  # tied: counted once
        for layer in self.layers:
            layer.mlp.proj.to(torch.bfloat16)


def test_the_whole_depth_is_the_built_kinds_times_their_layers():
    model = Model()
    kinds = [shards.layer_kind(layer) for layer in model.layers] + ["moe"] * 5  # 1 dense, 6 MoE in all
    found = fit.weights(model, list(model.layers), kinds)
    assert found["layers"] == {"dense": 1, "moe": 6}
    assert found["layer_bytes"] == {"dense": 128, "moe": 128 + 1024}
    assert found["outside_layers_bytes"] == 512
    assert found["weights_bytes"] == 512 + 128 + 6 * 1152


def test_a_kind_no_built_layer_holds_is_refused():
    model = Model()
    with pytest.raises(ValueError, match="no built layer of kind moe"):
        fit.weights(model, [model.layers[0]], ["dense", "moe"])


@pytest.mark.parametrize("memory, fraction, fits, starts", [
    (10_000, 0.9, True, "fits: "),
    (10_000, None, True, "fits: "),
    (8_000, 0.5, False, "does not fit: "),  # the weights fit, the fraction leaves no KV cache
    (5_000, 0.9, False, "does not fit: "),  # the weights alone do not fit
])
def test_the_verdict_at_a_static_fraction(memory, fraction, fits, starts):
    found = {"weights_bytes": 6_000, "outside_layers_bytes": 0, "layer_bytes": {}, "layers": {}}
    out = fit.verdict(found, memory, fraction, "--mem-fraction-static", "GPU")
    assert out["fits"] is fits and out["text"].startswith(starts)
    if fraction is not None and memory > 6_000:
        assert out["kv_cache_bytes"] == int(fraction * memory - 6_000)
        assert f"--mem-fraction-static {fraction:g}" in out["text"]

"""fix/outputs.py: what "the compiled outputs equal eager's" means."""

from __future__ import annotations

import pytest
import torch

from graphbreak_doctor.fix.outputs import same, same_shapes


class _Cache:
    """Like a model's key-value cache in its output: no ``==`` of its own."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.layers = [{"keys": keys}]
        self.parent = self  # a cycle ends at the depth limit


def test_an_object_without_its_own_equality_compares_by_its_attributes():
    x = torch.arange(6.0)
    assert same({"out": x, "cache": _Cache(x)}, {"out": x.clone(), "cache": _Cache(x.clone())})
    assert not same({"cache": _Cache(x)}, {"cache": _Cache(x + 1)})
    assert same_shapes(_Cache(x), _Cache(x + 1)) and not same_shapes(_Cache(x), _Cache(x[:3]))
    # Another class, or a value that is not an object of the same class, differs.
    assert not same(_Cache(x), object()) and not same(_Cache(x), None)
    assert same(3, 3) and not same(3, 4) and not same(x, 3)


def test_a_model_output_with_its_cache_equals_a_second_run_of_the_same_model():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, vocab_size=64)
    model = transformers.LlamaModel(config).eval()
    ids = torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        first, second = model(input_ids=ids), model(input_ids=ids)
        other = model(input_ids=(ids + 1) % 64)
    assert first.past_key_values is not second.past_key_values
    assert same(first, second) and not same(first, other)

"""Piecewise mode: fullgraph over the layer, cut at the attention op as SGLang's runner does."""

import pytest

from graphbreak_doctor.diagnose import diagnose
from graphbreak_doctor.targets.models import glm5


@pytest.fixture(scope="module")
def attention():
    return diagnose(lambda _log: glm5.build_attention(config=glm5.load_config(), tokens=16, tp=1),
                    mode="piecewise", device="sm120")


def test_attention_block_is_one_graph_cut_into_three_pieces(attention):
    assert attention.modes == ["piecewise"]
    assert attention.fullgraph.ran and attention.fullgraph.ok is True
    assert attention.breaks == []
    (graph,) = attention.graphs
    assert "graphbreak_doctor.mla_attention" in graph.op_names
    # projections before the attention kernel | the kernel | output projection after it
    assert graph.pieces == 3
    assert attention.target.split_ops == ["graphbreak_doctor::mla_attention"]


def test_without_split_ops_there_are_no_pieces():
    findings = diagnose(lambda _log: glm5.build_attention(config=glm5.load_config(), tokens=16, tp=1),
                        mode="fullgraph", device="sm120")
    assert findings.fullgraph.ok is True
    assert [g.pieces for g in findings.graphs] == [0]

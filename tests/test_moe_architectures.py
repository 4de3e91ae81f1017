"""Which MoE architectures the doctor traces: every one that both the
installed transformers and SGLang's model registry know, read from the two
registries (not listed by hand), has its row in the table in docs/models.md, which
`benchmarks/moe_architectures.py` writes by tracing each from a config of
transformers' defaults. A release that adds an architecture fails here
until the table is made again."""

from __future__ import annotations

import importlib.util
import re

import pytest

from conftest import ROOT

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not HAS_SGLANG, reason="SGLang is not installed")]
HEADING = "## Which MoE architectures the doctor traces"


def _table_rows() -> dict[str, str]:
    text = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    assert HEADING in text
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([A-Za-z0-9_]+)` \| [^|]+ \| ([^|]+) \|", section, re.M)}


def test_sglangs_registry_is_read_from_its_files():
    from graphbreak_doctor.targets.frameworks.sglang.served import served_architectures

    served = served_architectures()
    assert served["GlmMoeDsaForCausalLM"] == "sglang.srt.models.glm4_moe"
    assert served["Qwen3MoeForCausalLM"] == "sglang.srt.models.qwen3_moe"
    assert len(served) > 100


def test_the_readme_has_a_row_for_every_moe_architecture_both_registries_know():
    from benchmarks.moe_architectures import moe_architectures

    archs = moe_architectures()
    assert {"GlmMoeDsaForCausalLM", "DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"} <= set(archs)
    rows = _table_rows()
    assert sorted(set(archs) - set(rows)) == [], "architectures with no row: run benchmarks/moe_architectures.py"
    assert sorted(set(rows) - set(archs)) == [], "rows of architectures neither registry lists together any more"
    for arch, result in rows.items():
        assert result.strip().startswith(("traced", "stopped", "refused")), (arch, result)

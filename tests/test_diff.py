"""`diff`: two diagnoses side by side, matched as baselines match breaks."""

from __future__ import annotations

import copy
import importlib.metadata
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from graphbreak_doctor.gate.diff import diff
from graphbreak_doctor.diagnose import diagnose, target_builder
from graphbreak_doctor.model import Findings
from graphbreak_doctor.render import diff_html, diff_terminal

from conftest import FP4_WRAPPER_COLD, other_flashinfer_python
from test_glm5_golden import layer_args

ROOT = Path(__file__).resolve().parents[1]
FLASHINFER = importlib.metadata.version("flashinfer-python")


def trace(name: str) -> Findings:
    return diagnose(target_builder(f"fixtures.breaks.{name}:target"), mode="both", device="cpu")


@pytest.fixture(scope="module")
def traced() -> dict[str, Findings]:
    return {name: trace(name) for name in ("subprocess_call", "logging_calls", "clean", "hostile_text")}


def test_same_findings_match_completely(traced):
    d = diff(traced["logging_calls"], traced["logging_calls"])
    assert d.identical and d.match_rate == 1.0
    assert [p.a.key() for p in d.both] == sorted({b.key() for b in traced["logging_calls"].breaks})
    assert d.versions == [] and d.device == [] and d.verdict is None


def test_breaks_only_in_a_only_in_b_and_the_verdict_change(traced):
    d = diff(traced["subprocess_call"], traced["clean"], "before", "after")
    assert [e.category for e in d.only_a] == ["subprocess"]
    assert d.only_b == [] and d.both == []
    assert (d.verdict.a, d.verdict.b) == ("failed", "ok")
    assert d.match_rate == 0.0
    text = diff_terminal.render(d)
    assert "verdict changed: fullgraph failed -> ok" in text
    assert "only in A (gone in B):" in text and "[subprocess] probe_version (fixtures)" in text
    back = diff(traced["clean"], traced["subprocess_call"])
    assert [e.category for e in back.only_b] == ["subprocess"] and back.only_a == []


def test_matching_ignores_line_numbers(traced):
    moved = copy.deepcopy(traced["logging_calls"])
    for b in moved.breaks:
        b.site = type(b.site)(**{**b.site.__dict__, "line": b.site.line + 40})
        b.actionable_frame = type(b.actionable_frame)(**{**b.actionable_frame.__dict__, "line": b.actionable_frame.line + 40})
    assert diff(traced["logging_calls"], moved).identical
    renamed = copy.deepcopy(traced["logging_calls"])
    renamed.breaks[0].gb_type = "something else"
    d = diff(traced["logging_calls"], renamed)
    assert len(d.only_a) == len(d.only_b) == 1


def test_version_and_device_differences(traced):
    other = copy.deepcopy(traced["logging_calls"])
    other.environment["flashinfer"] = "9.9.9"
    other.device = {"name": "cuda", "emulated": False, "gpu": "NVIDIA H200", "capability": "9.0"}
    d = diff(traced["logging_calls"], other)
    assert [(c.what, c.b) for c in d.versions] == [("flashinfer", "9.9.9")]
    assert {c.what: (c.a, c.b) for c in d.device} == {
        "name": ("cpu", "cuda"), "gpu": ("", "NVIDIA H200"), "capability": ("", "9.0"),
    }
    assert "device: name cpu -> cuda" in diff_terminal.render(d)


def test_json_form(traced):
    d = diff(traced["subprocess_call"], traced["logging_calls"], "a.json", "b.json")
    data = json.loads(d.to_json())
    assert data["schema_version"] == 1 and data["kind"] == "graphbreak-doctor diff"
    assert data["a"]["label"] == "a.json" and data["a"]["verdict"] == "failed"
    assert [e["category"] for e in data["only_a"]] == ["subprocess"]
    assert {e["category"] for e in data["only_b"]} == {"logging"}
    assert data["match_rate"] == 0.0
    assert d.to_json() == diff(traced["subprocess_call"], traced["logging_calls"], "a.json", "b.json").to_json()


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.csp = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if a.get("http-equiv") == "Content-Security-Policy":
            self.csp = a["content"]


def test_html_is_self_contained_and_escapes_text(traced):
    page = diff_html.render(diff(traced["clean"], traced["hostile_text"], "<b>a</b>", "b"))
    parsed = _Page()
    parsed.feed(page)
    assert "script" not in parsed.tags and "link" not in parsed.tags and "img" not in parsed.tags
    assert "default-src 'none'" in parsed.csp and "script-src" not in parsed.csp
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;a&lt;/b&gt;" in page
    assert 'id="stat-new"><b>2</b>' in page


def test_cli_diff_reads_json_and_logs_and_fails_on_new(cli, tmp_path, traced):
    a, b = tmp_path / "clean.json", tmp_path / "sub.json"
    a.write_text(traced["clean"].to_json())
    b.write_text(traced["subprocess_call"].to_json())
    out_json, out_html = tmp_path / "d.json", tmp_path / "d.html"
    result = cli("diff", str(a), str(b), "--fail-on-new", "--json", str(out_json), "--html", str(out_html))
    assert result.returncode == 1, result.stderr
    assert "only in B (new in B):" in result.stdout
    assert json.loads(out_json.read_text())["only_b"][0]["category"] == "subprocess"
    assert "<!DOCTYPE html>" in out_html.read_text()
    assert cli("diff", str(b), str(a), "--fail-on-new").returncode == 0
    assert cli("diff", str(a), str(b)).returncode == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 99}')
    result = cli("diff", str(bad), str(a))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def _both_versions(traces, args: tuple[str, ...]) -> tuple[Findings, Findings]:
    """(flashinfer 0.6.3, 0.7.4) findings of the same trace, each from its own
    environment's session traces (`make test` shares them between stages)."""
    other = other_flashinfer_python()
    if other is None:
        pytest.skip("needs both test environments (.venv and .venv-fi063: make venv)")
    runs = [traces.get(*args), traces.get(*args, python=other)]
    for run in runs:
        # 3: Dynamo crashed after the breaks (FlashInfer 0.6.3's dense layer in explain
        # mode); the findings are written all the same, and the goldens say so.
        assert run.code in (0, 3) and run.findings is not None, run.stderr[-3000:]
    mine, theirs = (copy.deepcopy(r.findings) for r in runs)
    return (theirs, mine) if not FLASHINFER.startswith("0.6.") else (mine, theirs)


# Both FlashInfer versions in one test: it runs once, in the 0.6.3 environment,
# after both FlashInfer stages (`make test-both-versions`), on their traces.
ONCE = pytest.mark.skipif(not FLASHINFER.startswith("0.6."),
                          reason="compares both FlashInfer versions: runs in the flashinfer 0.6.3 environment")


@pytest.mark.both_versions
@ONCE
def test_diff_of_flashinfer_versions_on_fp4(traces):
    # Cold: the releases differ in what a first call meets (0.6.3's loader probes the file system).
    old, new = _both_versions(traces, FP4_WRAPPER_COLD)
    assert old.environment["flashinfer"] == "0.6.3" and new.environment["flashinfer"] == "0.7.4"
    d = diff(old, new, "0.6.3", "0.7.4")
    assert [(c.what, c.a, c.b) for c in d.versions] == [("flashinfer", "0.6.3", "0.7.4")]
    keys_old, keys_new = {b.key() for b in old.breaks}, {b.key() for b in new.breaks}
    assert {e.key() for e in d.only_a} == keys_old - keys_new
    assert {e.key() for e in d.only_b} == keys_new - keys_old
    assert d.only_a or d.only_b


def _golden(version: str) -> set[tuple[str, str, str, str]]:
    data = json.loads((ROOT / "tests" / "golden" / f"glm5-dense-sm120-flashinfer-{version}.json").read_text())
    return {(b["category"], b["package"], b["function"], b["gb_type"]) for b in data["breaks"]}


@pytest.mark.slow
@pytest.mark.both_versions
@ONCE
def test_diff_of_flashinfer_versions_on_the_dense_layer(traces):
    """What changed between FlashInfer 0.6.3 and 0.7.4 in GLM-5's dense layer,
    against the committed golden findings of each version."""
    old, new = _both_versions(traces, layer_args("dense", "sm120"))
    d = diff(old, new, "flashinfer 0.6.3", "flashinfer 0.7.4")
    short = lambda entries: {(e.category, e.package, e.qualname, e.gb_type) for e in entries}  # noqa: E731
    # Matched as baselines match: category, package, function, gb_type (the goldens hold all four).
    assert short(d.only_a) == _golden("0.6.3") - _golden("0.7.4")
    assert short(d.only_b) == _golden("0.7.4") - _golden("0.6.3")
    # Warm (the default), 0.6.3's autotuner still hashes its runner in Python, which Dynamo cannot trace.
    assert ("opaque-call", "flashinfer", "TunableRunner.__hash__") in {s[:3] for s in short(d.only_a)}
    assert "flashinfer 0.6.3 -> 0.7.4" in diff_terminal.render(d)

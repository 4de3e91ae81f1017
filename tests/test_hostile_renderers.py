"""Hostile findings and the file renderers (the fourth hostile round): a
renderer writes every schema-valid findings document it is given, escaping
what its format cannot hold, so no output is lost to another's failure; JSON
output is JSON (no NaN); a compressed input cut short is exit 3.

Findings here are written the way a file from elsewhere holds them (Python's
JSON writer: lone surrogates as ``\\ud800``, NaN as a bare ``NaN``), checked
to be valid against the findings schema, and read by the command line in
this process (``main``), as test_hostile.py does.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from graphbreak_doctor.model import Findings, GateReport
from hostile_material import graph_break_log, main, make_break, make_findings, one_error_line
from schema_check import violations

DEPTH = 900


def _strict_json(text: str):
    """Parsed JSON that holds no NaN or Infinity (which JSON has not)."""
    def refuse(constant):
        raise AssertionError(f"bare {constant} in JSON output")
    return json.loads(text, parse_constant=refuse)


def _with_break(**changes) -> dict:
    b = make_break(0)
    site = dataclasses.replace(b.site, **changes.pop("site", {}))
    b = dataclasses.replace(b, site=site, actionable_frame=site, stack=[site], **changes)
    return dataclasses.replace(make_findings(0), breaks=[b]).to_dict()


def _hostile_documents() -> dict[str, str]:
    """name -> the JSON text of schema-valid findings a renderer once failed on."""
    docs = {
        "unknown-category": _with_break(category="made-up-category"),
        "nul": _with_break(site={"file": "/srv/app/a\x00b.py", "code": "x\x00y"}, gb_type="bad\x00type\x1b[2J"),
        "surrogate": _with_break(site={"file": "/srv/app/\ud800.py", "qualname": "M.\udfff"}, culprit="\ud800"),
    }
    docs["surrogate"]["environment"]["python"] = "3.11\ud800"
    deep = make_findings(1).to_dict()
    deep["target"]["facts"]["deep"] = deep["environment"]["torch"] = deep["device"]["name"] = "@DEEP@"
    texts = {name: json.dumps(doc) for name, doc in docs.items()}  # ensure_ascii: "\ud800" as its escape
    texts["facts-900-deep"] = json.dumps(deep).replace('"@DEEP@"', '{"k": ' * DEPTH + '"leaf"' + "}" * DEPTH)
    for name, text in texts.items():
        if name != "facts-900-deep":  # json.loads of 900 levels: the schema does not look below "facts"
            assert violations(json.loads(text), "findings") == [], name
    return texts


def _nesting(value) -> int:
    """Levels of {"k": ...} down to "leaf", counting those written as JSON text below the cut."""
    levels = 0
    while isinstance(value, dict):
        value, levels = value["k"], levels + 1
    if value == "leaf":
        return levels
    assert isinstance(value, str) and value.endswith('"leaf"' + "}" * value.count('{"k": ')), value[:80]
    return levels + value.count('{"k": ')


@pytest.mark.unchecked_json("hostile.json")
def test_every_gate_output_is_written_for_schema_valid_hostile_findings(tmp_path, capsys):
    for name, text in _hostile_documents().items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "hostile.json").write_text(text, encoding="utf-8")
        outputs = {"junit": folder / "j.xml", "sarif": folder / "s.sarif", "json": folder / "o.json"}
        code, out, err = main(capsys, "check", "--from", folder / "hostile.json", "--junit", outputs["junit"],
                              "--sarif", outputs["sarif"], "--json", outputs["json"])
        assert code == 1 and "gate: FAILED" in out and err == "", (name, err)
        # Every file is whole UTF-8 in its own syntax.
        junit = outputs["junit"].read_bytes().decode("utf-8")
        ElementTree.fromstring(junit.encode("utf-8"))
        sarif = _strict_json(outputs["sarif"].read_bytes().decode("utf-8"))
        written = _strict_json(outputs["json"].read_bytes().decode("utf-8"))
        result = sarif["runs"][0]["results"][0]
        rules = sarif["runs"][0]["tool"]["driver"]["rules"]
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        if name == "unknown-category":
            assert result["ruleId"] == "made-up-category" and rules[0]["help"]["text"]
        if name == "nul":
            assert "\\x00" in junit and "\x00" not in junit
            assert "%00" in result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            assert "bad\x00type" in result["message"]["text"]  # a JSON escape in the file: \u0000
            assert written["breaks"][0]["site"]["file"] == "/srv/app/a\x00b.py"
        if name == "surrogate":
            assert "\\ud800" in junit
            assert written["environment"]["python"] == "3.11\ud800"  # read back as it was
            assert written["breaks"][0]["culprit"] == "\ud800" and "\ud800" in result["message"]["text"]
        if name == "facts-900-deep":
            # The loader takes facts 900 deep (free form); the JSON written
            # keeps them, below a bounded depth as JSON text.
            assert _nesting(written["target"]["facts"]["deep"]) == DEPTH
            assert _nesting(written["environment"]["torch"]) == _nesting(written["device"]["name"]) == DEPTH


@pytest.mark.unchecked_json("hostile.json", "plain.json")
def test_html_report_and_diff_render_schema_valid_hostile_findings(tmp_path, capsys):
    plain = tmp_path / "plain.json"
    plain.write_text(make_findings(1).to_json(), encoding="utf-8")
    for name, text in _hostile_documents().items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "hostile.json").write_text(text, encoding="utf-8")
        code, _out, err = main(capsys, "report", folder / "hostile.json", "--html", folder / "r.html")
        assert code == 0, (name, err)
        code, _out, err = main(capsys, "diff", plain, folder / "hostile.json", "--json", folder / "d.json",
                               "--html", folder / "d.html")
        assert code == 0, (name, err)
        page = (folder / "r.html").read_bytes().decode("utf-8")
        diff_page = (folder / "d.html").read_bytes().decode("utf-8")
        _strict_json((folder / "d.json").read_bytes().decode("utf-8"))
        assert "\x00" not in page + diff_page
        if name == "nul":
            assert "a\\x00b.py" in page
        if name == "surrogate":
            assert "3.11\\ud800" in page and "\\ud800.py" in page
        if name == "facts-900-deep":
            assert page.count("<dl class=\"kv nested\">") < 50 and "leaf" in page and "leaf" in diff_page


def test_a_compressed_input_cut_short_exits_3_as_the_readme_says(tmp_path, capsys):
    zstandard = pytest.importorskip("zstandard")
    # One report and a findings file: small enough that the cut falls inside
    # the first zstd block, so nothing decodes before it.
    contents = {"log": graph_break_log(1).encode(), "findings.json": make_findings(2).to_json().encode()}
    packers = {"gz": gzip.compress, "zst": zstandard.ZstdCompressor().compress}
    for (what, data), (suffix, pack) in [(c, p) for c in contents.items() for p in packers.items()]:
        path = tmp_path / f"{what}.{suffix}"
        packed = pack(data)
        path.write_bytes(packed[: int(len(packed) * 0.8)])
        code, out, err = main(capsys, "check", "--from", path)
        assert code == 3, (path.name, out, err)
        assert "Traceback" not in err
        assert "could not be parsed (first: the file ends early" in out and "CRASHED" in out, out
        code, _out, err = main(capsys, "ingest", path, "--json", tmp_path / "i.json", "--no-html")
        assert code == 0, (path.name, err)
        unparsed = json.loads((tmp_path / "i.json").read_text())["unparsed_events"]
        assert "the file ends early" in [u["reason"].split(" (")[0] for u in unparsed], path.name
    code, _out, err = main(capsys, "report", tmp_path / "findings.json.zst", "--html", tmp_path / "r.html")
    assert code == 2 and "zstd" in one_error_line(err) and not (tmp_path / "r.html").exists()


@pytest.mark.unchecked_json("nan.json")
def test_json_outputs_never_write_nan_or_infinity(tmp_path, capsys):
    nan, inf = float("nan"), float("inf")
    f = make_findings(1, environment={"python": "3.11.7", "torch": nan})
    f.target.facts.update(nan=nan, limits=[inf, -inf], nested={"x": [nan]})
    f.device["memory"] = inf
    text = f.to_json()
    data = _strict_json(text)
    assert data["target"]["facts"]["nan"] == "NaN" and data["target"]["facts"]["limits"] == ["Infinity", "-Infinity"]
    assert data["target"]["facts"]["nested"] == {"x": ["NaN"]} and data["environment"]["torch"] == "NaN"
    assert violations(data, "findings") == []
    # The same from a file written elsewhere (Python's writer: bare NaN, Infinity).
    doc = make_findings(1).to_dict()
    doc["environment"]["torch"], doc["device"]["memory"] = nan, inf
    doc["target"]["facts"].update(nan=nan, limits=[inf, -inf])
    source = tmp_path / "nan.json"
    source.write_text(json.dumps(doc))
    assert "NaN" in source.read_text() and "-Infinity" in source.read_text()
    other = tmp_path / "plain.json"
    other.write_text(make_findings(0).to_json(), encoding="utf-8")
    runs = [("check", "--from", source, "--json", tmp_path / "o.json", "--sarif", tmp_path / "s.sarif"),
            ("diff", other, source, "--json", tmp_path / "d.json", "--no-html"),
            ("baseline", "write", "--from", source, "-o", tmp_path / "b.json")]
    for argv in runs:
        code, _out, err = main(capsys, *[a for a in argv if a != "--no-html"])
        assert code in (0, 1) and err == "", (argv, err)
    for name in ("o.json", "s.sarif", "d.json", "b.json"):
        _strict_json((tmp_path / name).read_text(encoding="utf-8"))
    written = _strict_json((tmp_path / "o.json").read_text())
    assert written["target"]["facts"]["nan"] == "NaN" and written["device"]["memory"] == "Infinity"


# ------------------------------------------------------------ the property

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

# Characters no format takes as they are: NUL and other controls, lone
# surrogates, bidirectional overrides, XML's non-characters, line separators.
_NASTY = ["\x00", "\x07", "\x1b[31m", "\ud800", "\udfff", "\u202e", "\ufffe", "\uffff", "\x85", "\u2028",
          "\r", "\n", "]]>", "<&\"'", "`", "{call}", "%s"]
_CHARACTERS = st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))
_TEXT = st.lists(st.one_of(st.sampled_from(_NASTY), st.text(_CHARACTERS, max_size=4)), max_size=4).map("".join)
_FREE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=8,
)


def _strings_replaced(value, pool: list[str], counter: list[int]):
    """``value`` (findings as JSON data) with every string replaced by the
    next of ``pool`` (drawing one per field would make the test slow)."""
    if isinstance(value, str):
        counter[0] += 1
        return pool[counter[0] % len(pool)]
    if isinstance(value, list):
        return [_strings_replaced(v, pool, counter) for v in value]
    if isinstance(value, dict):
        return {k: _strings_replaced(v, pool, counter) for k, v in value.items()}
    return value


@hypothesis.settings(max_examples=50, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large])
@hypothesis.given(data=st.data())
def test_every_file_renderer_writes_any_schema_valid_findings(data):
    from graphbreak_doctor import render
    from graphbreak_doctor.gate.diff import diff
    from graphbreak_doctor.gate.policy import Policy, evaluate

    pool = data.draw(st.lists(_TEXT, min_size=1, max_size=7))
    doc = _strings_replaced(make_findings(2).to_dict(), pool, [data.draw(st.integers(0, 6))])
    doc["target"]["facts"] = data.draw(st.dictionaries(_TEXT, _FREE, max_size=3))
    doc["environment"] = data.draw(st.dictionaries(_TEXT, _FREE, max_size=3))
    doc["device"] = data.draw(st.dictionaries(_TEXT, _FREE, max_size=3))
    for b in doc["breaks"]:
        b["modes"] = ["explain"]
    doc["modes"], doc["outcome"] = ["explain"], "complete"
    assert violations(doc, "findings") == []
    findings = Findings.from_dict(doc)
    subjects = {"findings": findings,
                "gate": GateReport(device=pool[0], targets=[evaluate(pool[-1], findings, Policy())]),
                "diff": diff(make_findings(1), findings)}
    for r in render.file_renderers(*subjects):
        text = r.render(subjects[r.renders])
        text.encode("utf-8")  # no lone surrogate: the file can be written
        if r.suffix == ".xml":
            ElementTree.fromstring(text.encode("utf-8"))
        elif r.suffix in (".json", ".sarif"):
            _strict_json(text)

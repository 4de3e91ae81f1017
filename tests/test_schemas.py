"""The JSON Schemas of the documents the doctor writes
(graphbreak_doctor/model/schema/): well-formed, shipped in the package,
enforced on what the tests write (conftest.py's autouse fixture, through
tests/schema_check.py), and the field locations the README and docs/ name
checked against them."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import schema_check
from conftest import ROOT
from graphbreak_doctor.model import Findings, FixOutcome, schema
from hostile_material import make_findings

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_kind_has_a_well_formed_schema_named_by_its_file():
    assert set(schema.KINDS) == {"findings", "baseline", "diff", "matrix"}
    for kind, doc in schema.load_all().items():
        Draft202012Validator.check_schema(doc)
        assert doc["$id"] == schema.file_name(kind)
        assert doc["$schema"].endswith("/draft/2020-12/schema")
        assert doc["additionalProperties"] is False
        for const in ("schema_version", "kind"):
            if const in doc["properties"]:
                assert "const" in doc["properties"][const]


def test_the_findings_schema_holds_every_field_the_dataclasses_write():
    """A field added to a dataclass without its schema fails here, before any
    file is written (the hook would catch it too, later and less plainly)."""
    findings = schema.load("findings")
    defs = findings["$defs"]
    from graphbreak_doctor.model import findings as model

    for name in ("Frame", "SourceExcerpt", "Fix", "TargetInfo", "JitRequest", "Break", "Hazard", "UnparsedEvent",
                 "FullgraphVerdict", "GraphInfo", "DecompiledCode", "RootCause", "Rung", "Region", "FixOutcome"):
        fields = [f.name for f in dataclasses.fields(getattr(model, name))]
        assert list(defs[name]["properties"]) == fields, name
    assert list(findings["properties"]) == [f.name for f in dataclasses.fields(Findings)]


def test_a_document_the_doctor_writes_is_valid_and_a_wrong_one_is_not():
    good = make_findings(2, fix=FixOutcome(ok=True, recipes=["guard-logging"], steps=1, max_steps=10)).to_dict()
    assert schema.kind_of(good) == "findings"
    assert schema_check.violations(good) == []

    bad = json.loads(json.dumps(good))
    bad["breaks"][0]["count"] = "2"  # a type
    bad["outcome"] = "finished"  # outside the vocabulary
    bad["breaks"][1]["site"]["column"] = 4  # a key the doctor does not write
    del bad["fullgraph"]["crashed"]  # a key it always writes
    found = "\n".join(schema_check.violations(bad))
    assert "findings.breaks[0].count: '2' is not of type 'integer'" in found
    assert "findings.outcome: 'finished' is not one of" in found
    assert "findings.breaks[1].site: Additional properties are not allowed ('column' was unexpected)" in found
    assert "findings.fullgraph: 'crashed' is a required property" in found


def test_old_findings_still_load_though_the_schema_describes_todays_form():
    """``fix`` at ``target.fix`` (written before ``target`` had a fixed form):
    the loader reads it as the top-level ``fix``; the schema refuses it."""
    old = make_findings(1).to_dict()
    old["target"]["fix"] = dataclasses.asdict(FixOutcome(ok=True, steps=1))
    del old["fix"], old["regions"]
    assert Findings.from_dict(old).fix == FixOutcome(ok=True, steps=1)
    assert any("'fix' was unexpected" in v for v in schema_check.violations(old))


def test_other_json_is_no_document():
    for other in ({"exit": 0, "stderr": ""}, [], {"schema_version": 99}, {"kind": "something else"}):
        assert schema.kind_of(other) is None and schema_check.violations(other) == []


@pytest.mark.unchecked_json("bad.json")  # the inner session's file, on purpose
def test_the_hook_fails_a_test_that_leaves_a_wrong_document(tmp_path):
    """The autouse fixture, in a pytest run of its own: a test that leaves an
    invalid findings file fails at teardown, naming the file and the
    violation; ``unchecked_json`` lets a test write one on purpose."""
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("conftest.py", "schema_check.py"):
        (suite / name).write_text((ROOT / "tests" / name).read_text())
    (suite / "test_inner.py").write_text(textwrap.dedent("""\
        import json
        import pytest
        from graphbreak_doctor.model import Findings

        BAD = Findings().to_dict()
        BAD["target"]["spec"] = 7

        def test_writes_a_wrong_document(tmp_path):
            (tmp_path / "bad.json").write_text(json.dumps(BAD))

        @pytest.mark.unchecked_json("bad.json")
        def test_writes_it_on_purpose(tmp_path):
            (tmp_path / "bad.json").write_text(json.dumps(BAD))
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                           str(tmp_path / "inner"), "test_inner.py"], cwd=suite, capture_output=True, text=True,
                          timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "2 passed, 1 error" in out, out
    assert "ERROR at teardown of test_writes_a_wrong_document" in out
    assert "bad.json is not a valid findings document (findings.schema.json)" in out
    assert "findings.target.spec: 7 is not of type 'string'" in out


def test_committed_baselines_are_valid_and_goldens_use_the_findings_names():
    """baselines/ holds baseline documents; tests/golden/ holds summaries of
    findings (not documents), whose break fields are named as in the findings."""
    committed = sorted((ROOT / "baselines").glob("*.json"))
    assert committed
    for path in committed:
        data = json.loads(path.read_text())
        assert schema.kind_of(data) == "baseline", path.name
        assert schema_check.violations(data) == [], path.name
    brk = schema.load("findings")["$defs"]["Break"]["properties"]
    goldens = sorted((ROOT / "tests" / "golden").glob("*.json"))
    assert goldens
    for path in goldens:
        data = json.loads(path.read_text())
        assert schema.kind_of(data) is None, path.name
        for b in [data.get("fullgraph_first"), *data.get("breaks", [])]:
            # "function" is the actionable frame's qualname (conftest.golden_break)
            assert b is None or set(b) - {"function"} <= set(brk), path.name


# --- the docs: every field location they name is in the schemas -------------------

# Named in the docs as where a key used to be (read back by the loader).
OLD_LOCATIONS = {"target.fix"}
PATH = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*(?:\[\])?(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\])?)+)`")
NOT_FIELDS = {"md", "py", "json", "txt", "so", "h", "log", "html", "toml", "cfg"}


def _deref(node: dict, doc: dict, schemas: dict) -> tuple[dict, dict]:
    while True:
        if "$ref" in node:
            where, _, pointer = node["$ref"].partition("#")
            if where:
                doc = schemas[where.removesuffix(".schema.json")]
            node = doc
            for part in filter(None, pointer.split("/")):
                node = node[part]
        elif "oneOf" in node:  # null or one schema
            node = next(n for n in node["oneOf"] if n.get("type") != "null")
        else:
            return node, doc


def resolves(kind: str, path: str) -> bool:
    """Whether a dotted path (``breaks[].fix.where``) names a key of ``kind``'s
    documents; a free-form object takes any key below it."""
    schemas = schema.load_all()
    doc = schemas[kind]
    node = doc
    for part in path.split("."):
        node, doc = _deref(node, doc, schemas)
        name, many = part.removesuffix("[]"), part.endswith("[]")
        props = node.get("properties")
        if props is None:
            extra = node.get("additionalProperties", True)
            if extra is True:
                return True  # free form: what lies below is the provider's
            if extra is False:
                return False
            node = extra
        elif name in props:
            node = props[name]
        else:
            return False
        if many:
            node, doc = _deref(node, doc, schemas)
            if node.get("type") != "array":
                return False
            node = node["items"]
    return True


def _doc_paths():
    tops = {k: set(doc["properties"]) for k, doc in schema.load_all().items()}
    defs = {name: k for k, doc in schema.load_all().items() for name in doc["$defs"]}
    for doc in DOCS:
        for line_no, line in enumerate(doc.read_text().splitlines(), 1):
            for path in PATH.findall(line):
                first, last = path.split(".")[0].removesuffix("[]"), path.rsplit(".", 1)[-1]
                if last in NOT_FIELDS or path in OLD_LOCATIONS:
                    continue
                if first in defs:  # TargetInfo.opaque_ops: a dataclass's field
                    yield f"{doc.name}:{line_no}", path, [defs[first]], f"#/$defs/{first}"
                elif any(first in top for top in tops.values()):
                    yield f"{doc.name}:{line_no}", path, [k for k, top in tops.items() if first in top], ""


def test_every_field_path_the_docs_name_is_in_a_schema():
    checked, wrong = 0, []
    for where, path, kinds, prefix in _doc_paths():
        checked += 1
        if prefix:
            kind = kinds[0]
            name, rest = path.split(".", 1)
            props = schema.load(kind)["$defs"][name]["properties"]
            ok = rest.split(".")[0] in props
        else:
            ok = any(resolves(kind, path) for kind in kinds)
        if not ok:
            wrong.append(f"{where}: `{path}` is in no schema")
    assert checked > 10
    assert not wrong, "\n".join(wrong)


def test_what_the_docs_call_top_level_is_top_level():
    tops = set(schema.load("findings")["properties"])
    said = [(doc.name, m) for doc in DOCS for m in re.findall(r"top-level `([a-z_]+)`", doc.read_text())]
    assert ("fix.md", "fix") in said
    assert [s for s in said if s[1] not in tops] == []


def _table(text: str, after: str) -> list[list[str]]:
    """The rows of the first table after the line that starts with ``after``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    rows, seen = [], False
    for line in lines[start + 1:]:
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not set(cells[0]) <= set("-: "):
                rows.append(cells)
        elif seen:
            break
    return rows[1:]  # the header


@pytest.mark.parametrize("kind,heading", [("findings", "Findings (no `kind`"), ("baseline", "Baseline (`kind`"),
                                          ("diff", "Diff (`kind`"), ("matrix", "Matrix (`kind`")])
def test_the_top_level_tables_list_every_key_of_the_schema(kind, heading):
    """docs/json-schema.md: each table names every top-level key of its
    document and no other, and the paths in its text are that document's."""
    rows = _table((ROOT / "docs" / "json-schema.md").read_text(), heading)
    keys = [k for row in rows for k in re.findall(r"`([a-z_]+)`", row[0])]
    assert sorted(keys) == sorted(schema.load(kind)["properties"])
    paths = [p for row in rows for p in PATH.findall(row[1]) if p not in OLD_LOCATIONS]
    assert [p for p in paths if not resolves(kind, p)] == []


def test_the_compile_maps_region_table_lists_every_key_of_a_region():
    rows = _table((ROOT / "docs" / "compile-map.md").read_text(), "JSON: `regions`")
    keys = [k for row in rows for k in re.findall(r"`([a-z_]+)`", row[0])]
    assert sorted(keys) == sorted(schema.load("findings")["$defs"]["Region"]["properties"])

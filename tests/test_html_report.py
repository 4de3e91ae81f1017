"""The HTML report, read back as a parsed document: sections, counts, one card
per break, folded decompiled code, the call-graph picture, self-containment,
and the command line that writes it (`trace --html`, `report`).

What a browser shows is tested in test_html_browser.py.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from graphbreak_doctor import cli as gbd_cli
from graphbreak_doctor.frames import call_graph
from graphbreak_doctor.model import doc_url
from graphbreak_doctor.diagnose import diagnose, target_builder
from graphbreak_doctor.model import Findings, Rung
from graphbreak_doctor.render import html, svg
from graphbreak_doctor.render.causes import cause_fixes

from conftest import FP4_WRAPPER_COLD

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ("<script>alert(1)</script>", "</textarea>")
FIXTURES = [
    "subprocess_call", "filesystem_exists", "filesystem_pathstat", "compiler_disable", "opaque_ctypes",
    "builtin_namespace", "builtin_datetime", "data_dependent", "logging_calls", "lru_hazard", "clean",
    "hostile_text",
]
SECTIONS = ["verdict", "root-causes", "breaks", "how-traced", "decompiled", "call-graph", "hazards"]
TWO_MB = 2_000_000


# --- a small DOM over html.parser -------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclasses.dataclass
class Element:
    tag: str
    attrs: dict[str, str | None]
    children: list = dataclasses.field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Element):
                yield from c.iter()

    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs) -> list[Element]:
        return [
            e for e in self.iter()
            if (tag is None or e.tag == tag) and (cls is None or cls in e.classes())
            and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def by_id(self, ident: str) -> Element:
        found = self.find_all(id=ident)
        assert len(found) == 1, f"{len(found)} elements with id {ident!r}"
        return found[0]


class _TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs))
        self.open[-1].children.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag, attrs):
        self.open[-1].children.append(Element(tag, dict(attrs)))

    def handle_endtag(self, tag):
        for i in range(len(self.open) - 1, 0, -1):
            if self.open[i].tag == tag:
                del self.open[i:]
                return
        raise AssertionError(f"stray </{tag}>")

    def handle_data(self, data):
        self.open[-1].children.append(data)


def parse(page: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(page)
    builder.close()
    assert [e.tag for e in builder.open] == ["#document"], "unclosed elements"
    return builder.root


def squash(text: str) -> str:
    return " ".join(text.split())


def definitions(dl: Element) -> dict[str, str]:
    """A <dl>'s own terms and their descriptions, as text."""
    items = [c for c in dl.children if isinstance(c, Element)]
    return {squash(t.text()): squash(d.text()) for t, d in zip(items[::2], items[1::2]) if t.tag == "dt" and d.tag == "dd"}


# --- findings of real runs ------------------------------------------------------


def trace(spec: str, device: str = "cpu") -> Findings:
    return diagnose(target_builder(spec), device=device)


@pytest.fixture(scope="module")
def fixture_reports() -> dict[str, tuple[Findings, str, Element]]:
    out = {}
    for name in FIXTURES:
        findings = trace(f"fixtures.breaks.{name}:target")
        page = html.render(findings)
        out[name] = (findings, page, parse(page))
    return out


def check_cards(findings: Findings, doc: Element) -> None:
    """One card per distinct break, saying what the findings say."""
    cards = doc.find_all("article", cls="card")
    assert [c.attrs["data-break-id"] for c in cards] == [b.id for b in findings.breaks]
    for b in findings.breaks:
        card = doc.by_id(f"break-{b.id}")
        assert card.attrs["data-category"] == b.category
        assert card.attrs["data-package"] == b.package
        text = squash(card.text())
        assert b.category in text and b.gb_type in text
        assert f"×{b.count}" in text
        assert all(m in text for m in b.modes)
        assert f"{html.short_path(b.site.file)}:{b.site.line}" in text
        if b.actionable_frame and b.actionable_frame.location() != b.site.location():
            assert f"{html.short_path(b.actionable_frame.file)}:{b.actionable_frame.line}" in text
        assert squash(b.fix.summary.replace("`", "")) in text
        if b.fix.snippet:
            assert squash(b.fix.snippet.splitlines()[0]) in text
        if b.gb_id:
            assert [a.attrs["href"] for a in card.find_all("a", cls="gb")] == [doc_url(b.gb_id)]
        for j in b.jit:
            assert f"this call {j.action}s {j.name}" in text
        if b.caused_by:
            links = [a.attrs["href"] for a in card.find_all("a")]
            assert f"#break-{b.caused_by}" in links
            doc.by_id(f"break-{b.caused_by}")
        stack = card.find_all("details", cls="stack")
        assert len(stack) == 1 and "open" not in stack[0].attrs
        assert len(stack[0].find_all("li")) == len(b.stack)


def check_verdict(findings: Findings, doc: Element) -> None:
    verdict = doc.by_id("verdict")
    fg = findings.fullgraph
    state = "crashed" if fg.crashed else "ok" if fg.ran and fg.ok else "failed" if fg.ran else "notrun"
    assert verdict.attrs["data-state"] == state
    text = squash(verdict.text())
    assert {"ok": "fullgraph OK", "failed": "fullgraph FAILED", "crashed": "tracing crashed"}.get(state, "") in text
    if state == "failed":
        assert fg.error in text
        assert f"#break-{fg.break_id}" in [a.attrs.get("href") for a in verdict.find_all("a")]
    hits = sum(b.count for b in findings.breaks)
    assert squash(doc.by_id("stat-breaks").text()).startswith(f"{len(findings.breaks)} distinct break")
    assert f"({hits} hit" in doc.by_id("stat-breaks").text()
    assert squash(doc.by_id("stat-causes").text()).startswith(f"{len(findings.root_causes)} root cause")
    assert squash(doc.by_id("stat-graphs").text()).startswith(f"{findings.graph_count} graph")
    assert findings.target.spec in text
    assert f"torch {findings.environment['torch']}" in text
    assert f"flashinfer {findings.environment['flashinfer'] or 'not installed'}" in text
    assert f"sglang {findings.environment['sglang'] or 'not installed'}" in text
    device = squash(doc.by_id("device").text())
    assert device.startswith("emulated") == bool(findings.device.get("emulated"))


def check_document(findings: Findings, page: str, doc: Element) -> None:
    ids = [e.attrs["id"] for e in doc.iter() if e.attrs.get("id") in SECTIONS + ["ladder"]]
    assert ids == SECTIONS + (["ladder"] if findings.ladder else [])
    check_verdict(findings, doc)
    check_cards(findings, doc)
    causes = doc.find_all("li", cls="cause")
    assert len(causes) == len(findings.root_causes)
    for li, cause in zip(causes, findings.root_causes):
        members = [a.attrs["href"] for a in li.find_all("ul")[0].find_all("a")]
        assert members == [f"#break-{i}" for i in cause.break_ids]
        n = len(cause.break_ids)
        assert f"remove {n} break{'s' if n != 1 else ''}" in squash(li.text())
    # Each cause shows its fix beside it, each fix once: a later cause with
    # the same fix points at the cause that shows it.
    for li, fixes in zip(causes, cause_fixes(findings)):
        shown = [squash(p.text()) for p in li.find_all("p", cls="cause-fix")]
        assert len(shown) == len(fixes), (shown, fixes)
        for text, (fix, earlier, _at) in zip(shown, fixes):
            if earlier:
                assert text.startswith(f"Fix: as root cause {earlier}") and fix.summary.replace("`", "") not in text
            else:
                assert text.startswith(f"Fix: {squash(fix.summary.replace('`', ''))}"), text
    graphs = doc.find_all("details", cls="graph")
    resumes = doc.find_all("details", cls="resume")
    assert len(graphs) == len(findings.graphs) and len(resumes) == len(findings.resume_code)
    assert not [d for d in graphs + resumes if "open" in d.attrs], "decompiled code is folded by default"
    for d, code in zip(resumes, findings.resume_code):
        assert code.source.strip().splitlines()[0] in d.text()
    assert len(doc.by_id("hazards").find_all("tr", cls="hazard")) == len(findings.hazards)
    check_call_graph(findings, doc)
    check_self_contained(page, doc)


def check_call_graph(findings: Findings, doc: Element) -> None:
    graph = call_graph(findings.breaks)
    drawn = doc.find_all("g", cls="node")
    if not graph.number_of_nodes():
        assert not drawn and not doc.find_all("svg")
        return
    assert len(drawn) == graph.number_of_nodes()
    assert {g.attrs["data-node"] for g in drawn} == set(graph.nodes)
    sites = {n for n, d in graph.nodes(data=True) if d.get("sites")}
    assert {g.attrs["data-node"] for g in drawn if "site" in g.classes()} == sites
    card_ids = {f"#break-{b.id}" for b in findings.breaks}
    for a in doc.by_id("callgraph").find_all("a"):
        assert a.attrs["href"] in card_ids | {f"#cause-{i}" for i in range(1, len(findings.root_causes) + 1)}
    assert len(doc.by_id("callgraph").find_all("path", cls="edge")) == graph.number_of_edges()


def check_self_contained(page: str, doc: Element) -> None:
    """Nothing to fetch: no external stylesheet, script, image or font, and a
    CSP that allows no network source and only our one script, by hash."""
    scripts = doc.find_all("script")
    assert len(scripts) == 1 and "src" not in scripts[0].attrs
    assert not doc.find_all("link") and not doc.find_all("img") and not doc.find_all("iframe")
    for e in doc.iter():
        for attr in ("src", "srcset", "data", "poster", "background"):
            assert attr not in e.attrs, f"<{e.tag} {attr}=...>"
        if e.tag != "a" and "href" in e.attrs:
            assert e.attrs["href"].startswith("#") or e.attrs["href"].startswith("url(#"), e.attrs
    style = "".join(s.text() for s in doc.find_all("style"))
    assert "@import" not in style and not re.search(r"url\((?!#)", style)
    csp = doc.find_all("meta", http_equiv="Content-Security-Policy")[0].attrs["content"]
    assert "default-src 'none'" in csp
    digest = base64.b64encode(hashlib.sha256(scripts[0].text().encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp
    assert page.count("<script") == 1


# --- fixtures ---------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_report(fixture_reports, name):
    findings, page, doc = fixture_reports[name]
    check_document(findings, page, doc)


def test_every_fixture_that_breaks_has_cards_resume_code_and_a_site_in_the_picture(fixture_reports):
    for name, (findings, _page, doc) in fixture_reports.items():
        if name in ("clean", "lru_hazard"):
            continue
        assert findings.breaks, name
        assert doc.find_all("article", cls="card"), name
        assert findings.resume_code, f"{name}: no depyf code for the resume functions"
        assert doc.find_all("g", cls="site"), name


def test_clean_target_reads_as_ok(fixture_reports):
    findings, _page, doc = fixture_reports["clean"]
    assert findings.fullgraph.ok and not findings.breaks
    assert "fullgraph OK" in squash(doc.by_id("verdict").text())
    assert "no graph breaks" in squash(doc.by_id("breaks").text())
    assert doc.find_all("details", cls="graph"), "the one captured graph is shown"


def test_hazard_is_listed(fixture_reports):
    findings, _page, doc = fixture_reports["lru_hazard"]
    assert [h.kind for h in findings.hazards] == ["lru_cache"]
    rows = doc.by_id("hazards").find_all("tr", cls="hazard")
    assert len(rows) == 1 and "lru_cache" in rows[0].text() and "lru_hazard.py:14" in squash(rows[0].text())


def test_source_lines_around_site_and_actionable_frame(fixture_reports):
    findings, _page, doc = fixture_reports["subprocess_call"]
    b = findings.breaks[0]
    card = doc.by_id(f"break-{b.id}")
    figures = card.find_all("figure", cls="source")
    assert len(figures) == 2  # Popen.__init__ in subprocess.py, then probe_version in the fixture
    hits = [f.find_all("span", cls="hit")[0] for f in figures]
    assert "threading.Lock()" in hits[0].text()
    assert "subprocess.check_output(" in hits[1].text()
    numbers = [int(s.text()) for s in figures[1].find_all("span", cls="no")]
    line = b.actionable_frame.line
    assert line in numbers and numbers == list(range(numbers[0], numbers[-1] + 1)) and len(numbers) > 1


def test_missing_source_file_shows_the_recorded_line(fixture_reports):
    findings, _page, _doc = fixture_reports["subprocess_call"]
    data = json.loads(findings.to_json())
    data["breaks"][0]["actionable_frame"]["file"] = "/nonexistent/elsewhere/probe.py"
    moved = Findings.from_dict(data)
    card = parse(html.render(moved)).by_id(f"break-{moved.breaks[0].id}")
    figure = card.find_all("figure", cls="source")[1]
    text = squash(figure.text())
    assert "no source lines recorded for this frame" in text
    assert moved.breaks[0].actionable_frame.code in text


def test_hostile_text_is_shown_as_text(fixture_reports):
    findings, page, doc = fixture_reports["hostile_text"]
    texts = [squash(doc.by_id(f"break-{b.id}").text()) for b in findings.breaks]
    for needle in HOSTILE:
        assert any(needle in t for t in texts), needle
        # Written escaped, never as markup.
        assert needle not in page
    # The message of graph_break(msg=...), the source line of the break, and
    # the file name of the exec'd helper all reach the page as text.
    assert any("User-inserted graph break" in t and HOSTILE[0] in t for t in texts)
    assert any(f"{HOSTILE[1]}{HOSTILE[0]}.py:2" in t for t in texts)
    assert not doc.find_all("textarea") and not doc.find_all("img")
    packages = {i.attrs["value"] for i in doc.find_all("input") if i.attrs.get("name") == "package"}
    assert packages == {b.package for b in findings.breaks}


def test_resume_code_is_in_the_findings_without_run_specific_names(fixture_reports):
    findings, _page, _doc = fixture_reports["logging_calls"]
    names = [d.name for d in findings.resume_code]
    assert any(n.startswith("layer (") for n in names)
    assert any(n.startswith("torch_dynamo_resume_in_layer_at_") for n in names)
    assert all(d.mode == "explain" for d in findings.resume_code)
    text = findings.to_json()
    assert not re.search(r"__compiled_fn_\d+_[0-9a-f]{8}_", text)
    assert Findings.from_json(text).resume_code == findings.resume_code


def test_same_findings_give_the_same_page(fixture_reports):
    findings, page, _doc = fixture_reports["logging_calls"]
    assert html.render(Findings.from_json(findings.to_json())) == page


def test_call_graph_layout_puts_callers_above_callees(fixture_reports):
    findings, _page, _doc = fixture_reports["subprocess_call"]
    graph = call_graph(findings.breaks)
    picture = svg.layout(graph)
    at = {n.key: (n.x, n.y) for n in picture.nodes}
    assert not svg.back_edges(graph)
    for a, b in graph.edges:
        assert at[a][1] < at[b][1], (a, b)
    boxes = sorted(at.values())
    for (x1, y1), (x2, y2) in zip(boxes, boxes[1:]):
        assert y1 != y2 or x2 - x1 >= svg.NODE_W
    assert all(0 <= x <= picture.width - svg.NODE_W and 0 <= y <= picture.height - svg.NODE_H for x, y in at.values())


def test_ladder_is_a_timeline_when_present(fixture_reports):
    findings, _page, _doc = fixture_reports["subprocess_call"]
    laddered = Findings.from_json(findings.to_json())
    b = laddered.breaks[0]
    laddered.ladder = [
        Rung(step=1, break_id=b.id, category=b.category, gb_type=b.gb_type, site=b.site.location(),
             recipe=b.fix.recipe, patch="CUDA_VERSION = torch.version.cuda", where="probe_version",
             result="next failure", detail="the next break is reported"),
        Rung(step=2, break_id="", category="other", gb_type="", site="", recipe="none", patch="",
             where="", result="fullgraph ok"),
    ]
    page = html.render(laddered)
    doc = parse(page)
    check_document(laddered, page, doc)
    rungs = doc.by_id("ladder").find_all("li", cls="rung")
    assert len(rungs) == 2
    assert "CUDA_VERSION = torch.version.cuda" in rungs[0].text() and "fullgraph ok" in rungs[1].text()
    assert [a.attrs["href"] for a in rungs[0].find_all("a")] == [f"#break-{b.id}"]


# --- real FlashInfer, and a 20-break run ----------------------------------------


@pytest.mark.flashinfer
def test_fp4_flashinfer_report(traces):
    findings = traces.get(*FP4_WRAPPER_COLD).findings
    page = html.render(findings)
    doc = parse(page)
    check_document(findings, page, doc)
    assert findings.device["emulated"] and len(findings.breaks) >= 3
    assert any(b.package == "flashinfer" for b in findings.breaks)
    assert any(b.jit for b in findings.breaks)
    for i, cause in enumerate(findings.root_causes, 1):
        assert (cause.frame.qualname or cause.frame.function) in doc.by_id(f"cause-{i}").text()
    # FlashInfer's stacks share Dynamo's polyfill frames at several depths: the
    # merged call graph has cycles; without the edges drawn upwards it is layered.
    graph = call_graph(findings.breaks)
    back = svg.back_edges(graph)
    at = {n.key: n.y for n in svg.layout(graph).nodes}
    assert all(at[a] < at[b] for a, b in graph.edges if (a, b) not in back)
    assert len(back) < graph.number_of_edges() // 4
    assert len(page.encode()) < TWO_MB


def test_many_breaks_report_is_small_and_complete(tmp_path):
    findings = trace("fixtures.many_breaks:target")
    assert len(findings.breaks) >= 20
    page = html.render(findings)
    size = len(page.encode())
    assert size < TWO_MB, f"{size} bytes"
    doc = parse(page)
    check_document(findings, page, doc)
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "many-breaks.html").write_text(page, encoding="utf-8")


def test_layer_meta_is_folded_below_the_breaks(fixture_reports):
    """A target's title shows in the banner; its shapes and facts (weight
    formats...) in "How it was traced", folded, below the root causes and the
    breaks with their fixes."""
    findings, _page, _doc = fixture_reports["subprocess_call"]
    data = json.loads(findings.to_json())
    data["target"].update(
        spec="glm5:dense:0", title="GLM-5 (GlmMoeDsaForCausalLM) dense layer 0",
        shapes={"hidden_size": 6144, "tokens": 128, "tp": 1},
        facts={"weight_formats": {"attention": "bf16", "mlp": "nvfp4 <e2m1>"}, "flashinfer_notes": []},
    )
    doc = parse(html.render(Findings.from_dict(data)))
    assert "GLM-5 (GlmMoeDsaForCausalLM) dense layer 0" in squash(doc.find_all("h1")[0].text())
    how = doc.by_id("how-traced")
    (folded,) = how.find_all("details", cls="how-traced")
    assert "open" not in folded.attrs
    facts = definitions(how.find_all("dl", cls="facts")[0])
    assert facts["shapes"] == "hidden_size=6144, tokens=128, tp=1"
    assert definitions(how.find_all("dl", cls="nested")[0]) == {"attention": "bf16", "mlp": "nvfp4 <e2m1>"}
    assert not doc.by_id("verdict").find_all("dl", cls="nested") and "hidden_size" not in doc.by_id("verdict").text()
    assert "flashinfer notes" not in facts  # empty values are left out


# --- command line -----------------------------------------------------------------


def test_trace_writes_html_by_default_and_report_renders_the_json_the_same(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert gbd_cli.main(["trace", "--target", "fixtures.breaks.subprocess_call:target", "--device", "cpu", "--json"]) == 0
    stem = "fixtures.breaks.subprocess_call.target-cpu-both"
    page_path = Path("reports") / f"{stem}.html"
    assert f"HTML report written to {page_path}" in capsys.readouterr().out
    page = (tmp_path / page_path).read_text(encoding="utf-8")
    findings = Findings.from_json((tmp_path / "reports" / f"{stem}.json").read_text())
    check_document(findings, page, parse(page))

    # CI saves JSON, a person renders it later: the same page.
    assert gbd_cli.main(["report", f"reports/{stem}.json", "--html", "later.html"]) == 0
    assert "HTML report written to later.html" in capsys.readouterr().out
    assert (tmp_path / "later.html").read_text(encoding="utf-8") == page


def test_no_html(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert gbd_cli.main(["trace", "--target", "fixtures.breaks.clean:target", "--device", "cpu", "--no-html"]) == 0
    assert "HTML report" not in capsys.readouterr().out
    assert not list(tmp_path.rglob("*.html"))
    # A folder the user names must exist: nothing is traced or written otherwise.
    assert gbd_cli.main(["trace", "--target", "fixtures.breaks.clean:target", "--device", "cpu", "--html", "x/r.html"]) == 2
    assert "x/r.html: no such folder x" in capsys.readouterr().err
    (tmp_path / "x").mkdir()
    assert gbd_cli.main(["trace", "--target", "fixtures.breaks.clean:target", "--device", "cpu", "--html", "x/r.html"]) == 0
    assert "HTML report written to x/r.html" in capsys.readouterr().out
    assert parse((tmp_path / "x" / "r.html").read_text()).by_id("verdict").attrs["data-state"] == "ok"


BAD_FINDINGS = [
    ("not json", "not graphbreak-doctor findings: Expecting value"),
    ('{"schema_version": 99}', "findings schema version 99 is not supported"),
    ("[1, 2]", "not graphbreak-doctor findings"),
    ('{"schema_version": 1, "breaks": [{"id": "x"}]}', "not graphbreak-doctor findings"),
    (None, "No such file or directory"),
]


@pytest.mark.parametrize("content,message", BAD_FINDINGS)
def test_report_rejects_what_is_not_findings(tmp_path, monkeypatch, capsys, content, message):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "in.json"
    if content is not None:
        source.write_text(content)
    assert gbd_cli.main(["report", str(source), "--html", "out.html"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graphbreak-doctor: error: ") and message in err[0]
    assert not (tmp_path / "out.html").exists() and not (tmp_path / "reports").exists()


def test_a_crashed_trace_with_no_breaks_does_not_read_as_nothing_to_fix():
    """A trace that stopped before any break was found is no verdict on the
    code past that point: the report says so where a clean trace says there
    is nothing to fix."""
    from graphbreak_doctor.diagnose import environment
    from graphbreak_doctor.model import CRASHED, MAP_MODE, FullgraphVerdict, TargetInfo

    findings = Findings(target=TargetInfo(spec="glm5-sglang:model:extend"), environment=environment(),
                        modes=[MAP_MODE], outcome=CRASHED,
                        fullgraph=FullgraphVerdict(ran=False, ok=False, crashed=True,
                                                   error="the phases stopped: the extend phase cannot run here"))
    page = html.render(findings)
    doc = parse(page)
    check_verdict(findings, doc)
    assert "nothing to fix" not in page
    assert "was not traced" in squash(doc.by_id("no-causes-crashed").text())
    assert "before the trace stopped" in squash(doc.by_id("breaks").text())


@pytest.mark.parametrize("layout, memory, shown", [
    ({"tp": 8, "pp": 1, "ep": 1, "dp": 1, "world_size": 8, "rank": 0}, {"text": "fits: weights 58.8 GB per GPU"}, True),
    ({"tp": 1, "pp": 1, "ep": 1, "dp": 1, "world_size": 1, "rank": 0}, {}, False),
    # Findings from elsewhere: a layout of the wrong types is not shown, and does not stop the page.
    ({"world_size": "8", "rank": [0]}, {"text": 5}, False)])
def test_the_layout_and_memory_fit_of_a_tensor_parallel_launch_are_shown_up_front(layout, memory, shown):
    from hostile_material import make_findings

    findings = make_findings(1)
    findings.target.facts["launch"] = {"layout": layout}
    findings.target.facts["memory"] = memory
    page = parse(html.render(findings))
    assert len(page.find_all(id="layout")) == len(page.find_all(id="memory")) == int(shown)
    if shown:
        assert page.by_id("layout").text() == "rank 0 of 8 (tp 8, pp 1, ep 1, dp 1)"
        assert page.by_id("memory").text().startswith("fits: weights 58.8 GB")

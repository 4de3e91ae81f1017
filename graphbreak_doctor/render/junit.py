"""JUnit XML for the gate: one testcase per target x mode.

The layout follows the Ant/Jenkins JUnit schema that CI systems read
(GitHub test reporters, GitLab, Jenkins): ``<testsuites>`` > ``<testsuite>``
> ``<testcase classname=TARGET name=MODE>``; a failed check is a
``<failure>`` whose message names the checks and whose text lists each
break with its location and fix; a crash under Dynamo is an ``<error>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from graphbreak_doctor.model import COMPLETE, CaseResult, GateReport, TargetResult
from graphbreak_doctor.model.cache_facts import cache_note
from graphbreak_doctor.model.json_text import as_text
from graphbreak_doctor.render.gate_text import describe_break
from graphbreak_doctor.render.renderer import GATE, Renderer
from graphbreak_doctor.text import escape_controls

SUITE = "graphbreak-doctor check"


def _case(t: TargetResult, case: CaseResult, device: str) -> ET.Element:
    el = ET.Element("testcase", classname=t.name, name=f"{case.mode} ({device})")
    if case.crashed:
        kind = "crash" if t.findings.outcome == COMPLETE else t.findings.outcome.replace(" ", "-")
        err = ET.SubElement(el, "error", message=case.crashed, type=kind)
        err.text = "The diagnosis of this target is not whole, so the gate cannot pass.\n" + case.crashed + "\n"
    elif case.failures:
        fail = ET.SubElement(
            el, "failure",
            message="; ".join(f"{f.check}: {f.reason}" for f in case.failures),
            type=case.failures[0].check,
        )
        lines = [f"{f.check}: {f.reason}" for f in case.failures]
        seen = set()
        for f in case.failures:
            for b in f.breaks:
                if b.id not in seen:
                    seen.add(b.id)
                    lines.extend(describe_break(b))
        fail.text = "\n".join(lines) + "\n"
    out = [f"{len(case.counted)} counted break(s) in {case.mode} mode"]
    if cache_note(t.findings.cache):
        out.append(f"verdict {cache_note(t.findings.cache)}")
        props = ET.Element("properties")
        ET.SubElement(props, "property", name="cache", value=t.findings.cache.source)
        ET.SubElement(props, "property", name="cache_stored_at", value=t.findings.cache.stored_at)
        el.insert(0, props)
    if t.baseline_used and t.disappeared:
        out.append("accepted in the baseline but no longer seen (the baseline can shrink):")
        out.extend(f"  - {e.describe()}" for e in t.disappeared)
    ET.SubElement(el, "system-out").text = "\n".join(out) + "\n"
    return el


def render(report: GateReport) -> str:
    cases = [(t, c) for t in report.targets for c in t.cases]
    counts = {
        "tests": str(len(cases)),
        "failures": str(sum(1 for _, c in cases if c.failures and not c.crashed)),
        "errors": str(sum(1 for _, c in cases if c.crashed)),
    }
    root = ET.Element("testsuites", name=SUITE, **counts)
    suite = ET.SubElement(root, "testsuite", name=SUITE, skipped="0", **counts)
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="device", value=report.device)
    env = report.targets[0].findings.environment if report.targets else {}
    for k in sorted(env):
        if env[k]:  # free form in findings from elsewhere: a number, a list
            ET.SubElement(props, "property", name=k, value=as_text(env[k]))
    for t, c in cases:
        suite.append(_case(t, c, report.device))
    ET.indent(root)
    # Control characters from findings (NUL, ESC) are not allowed in XML 1.0:
    # shown as escapes, as on the terminal, so the file stays well-formed.
    xml = escape_controls(ET.tostring(root, encoding="unicode"), keep="\n\t\r")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + xml + "\n"


RENDERER = Renderer("junit", GATE, render, suffix=".xml", option="--junit",
                    help="JUnit XML: one testcase per target x mode",
                    title="JUnit XML")

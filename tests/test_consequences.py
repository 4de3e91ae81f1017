"""Breaks Dynamo reports only because of an earlier one are linked to it."""

from pathlib import Path

from graphbreak_doctor.analysis import consequences
from graphbreak_doctor.diagnose import diagnose, target_builder
from graphbreak_doctor.model import Break, Fix, Frame
from graphbreak_doctor.render import get

ROOT = Path(__file__).resolve().parents[1]
MOE = ROOT / "fixtures" / "breaks" / "moe_loop.py"


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(MOE.read_text().splitlines(), 1) if text in line)


def test_the_loop_break_follows_from_the_branch_in_the_expert_loop():
    findings = diagnose(target_builder("fixtures.breaks.moe_loop:target"), mode="both", device="cpu")
    by_type = {b.gb_type: b for b in findings.breaks}
    branch, loop = by_type["Data-dependent branching"], by_type["graph break in loop"]
    assert (branch.site.file, branch.site.line) == (str(MOE), line_of("if routed.any():"))
    assert branch.category == "data-dependent" and not branch.caused_by
    assert loop.gb_id == "GB7000"
    assert loop.caused_by == branch.id
    assert loop.category == "data-dependent"
    assert loop.fix == branch.fix
    # Counted once: one root cause, holding the branch and the break it causes.
    assert len(findings.root_causes) == 1
    assert set(findings.root_causes[0].break_ids) == {branch.id, loop.id}
    assert findings.fullgraph.break_id == branch.id
    text = get("terminal").render(findings)
    assert f"follows from {branch.id}: Data-dependent branching at" in text
    assert "[other]" not in text
    html = get("html").render(findings)
    assert f'Follows from <a href="#break-{branch.id}">{branch.id}</a>' in html


def test_explain_alone_links_the_loop_break_to_the_break_dynamo_raised_it_from():
    """In explain mode Dynamo skips the frame and never reports the branch on
    its own: the cause comes from the loop break's exception."""
    findings = diagnose(target_builder("fixtures.breaks.moe_loop:target"), mode="explain", device="cpu")
    assert [b.gb_type for b in findings.breaks] == ["Data-dependent branching", "graph break in loop"]
    branch, loop = findings.breaks
    assert loop.caused_by == branch.id
    assert {b.category for b in findings.breaks} == {"data-dependent"}
    assert findings.message_fallbacks == {}  # the cause came from Dynamo's objects


def _break(bid: str, gb_id: str, site: Frame, category: str, hints=()) -> Break:
    return Break(id=bid, category=category, gb_id=gb_id, gb_type=bid, explanation="", hints=list(hints),
                 culprit="", via="", site=site, actionable_frame=site, package="model", stack=[site], count=1,
                 modes=["explain"], fix=Fix(category, "", "", ""))


def test_a_follow_up_with_nothing_on_its_stack_keeps_its_own_category():
    loop_site = Frame("/m/model.py", 30, "forward", "Model.forward")
    elsewhere = Frame("/m/other.py", 5, "helper", "helper")
    earlier = _break("a", "GB0170", elsewhere, "data-dependent")
    follow_up = _break("b", "GB7000", loop_site, "other")
    consequences.link([earlier, follow_up])
    assert (follow_up.caused_by, follow_up.category) == ("", "other")
    # An earlier break in the same frame explains it.
    same_frame = _break("c", "GB0007", Frame("/m/model.py", 28, "forward", "Model.forward"), "filesystem")
    consequences.link([earlier, same_frame, follow_up])
    assert (follow_up.caused_by, follow_up.category, follow_up.fix.recipe) == ("c", "filesystem", "filesystem")


def test_dynamos_hint_marks_a_follow_up_without_a_registry_id():
    from graphbreak_doctor.analysis.registry import caused_by_earlier_hint

    site = Frame("/m/model.py", 30, "forward", "Model.forward")
    assert consequences.is_consequential(_break("x", "", site, "other", hints=[caused_by_earlier_hint()]))
    assert not consequences.is_consequential(_break("y", "GB0170", site, "data-dependent"))

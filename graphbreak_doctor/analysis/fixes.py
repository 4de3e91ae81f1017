"""The suggested fix of a break, in the recipes' vocabulary (graphbreak_doctor.recipes).

- A break in the user's own code gets the advice of the rule that recognised
  it (or its category's), filled with the break's names and an example cut
  from its own source lines.
- A break inside a third-party package (the frame to change is not in the
  traced code's package) is fixed where the user's code calls into the
  package: that call becomes one opaque op -- the library's registered torch
  op when it has one (FlashInfer >= 0.7 registers
  ``torch.ops.flashinfer.fp4_quantize``), else a ``torch.library.custom_op``
  generated from the real function's signature. The change inside the
  library is the secondary advice.
- Where the fix ladder verified a change for a break (``fix``, or a saved
  ladder), that change is the fix, marked verified (:func:`attach_verified`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from graphbreak_doctor import recipes
from graphbreak_doctor.analysis import categories
from graphbreak_doctor.frames import INFRASTRUCTURE, at, frame_key, package_of
from graphbreak_doctor.model import VERIFIED_RESULTS, Break, Fix, Frame, Rung
from graphbreak_doctor.recipes.common import library_entry, source_of
from graphbreak_doctor.recipes.custom_op import signature_patch
from graphbreak_doctor.recipes.recipe import Names, Recipe
from graphbreak_doctor.recipes.registered_op import RECIPE as REGISTERED_OP
from graphbreak_doctor.recipes.registered_op import op_call_patch, registered_op_for

WRAP_CUSTOM_OP = "wrap-custom-op"


def where(frame: Frame | None) -> str:
    """'file:line, in qualname' of a frame, for a person."""
    if frame is None:
        return ""
    return at(frame, function=True)


def names_for(brk: Break) -> Names:
    act = brk.actionable_frame
    caller = None
    if act is not None and act in brk.stack:
        i = brk.stack.index(act)
        caller = brk.stack[i - 1] if i > 0 else None
    return Names(
        culprit=brk.culprit,
        entry=brk.via,
        function=(act.qualname or act.function).rsplit(".", 1)[-1] if act else "",
        where=where(act or brk.site),
        line=source_of(act or brk.site),
        site_line=source_of(brk.site),
        caller=(caller.qualname or caller.function) if caller else "",
        caller_where=where(caller),
        caller_line=source_of(caller),
        why=categories.get(brk.category).why if brk.category in categories.CATEGORIES else "",
    )


def _fill(recipe: Recipe, names: Names, snippet: str = "") -> Fix:
    advice = recipe.advice
    fields = defaultdict(lambda: "?", advice.fields(names))
    return Fix(
        recipe=recipe.name,
        summary=advice.summary.format_map(fields),
        detail=advice.detail.format_map(fields),
        snippet=snippet or (advice.example(names) if advice.example else "") or advice.snippet.format_map(fields),
        where=names.where,
    )


def _boundary(brk: Break, names: Names) -> Fix | None:
    """The fix at the frame of the user's code that calls into the third-party
    package the break is in; None for a break in the user's own code."""
    if brk.category == "compiler-disable" or brk.actionable_frame is None or not brk.stack:
        return None
    own = package_of(brk.stack[0].file)
    if brk.package in (own, *INFRASTRUCTURE):
        return None
    entry = library_entry(brk.stack)
    if entry is None:
        return None
    caller, frame, _module, fn = entry
    package = package_of(frame.file)
    call = f"{package}.{frame.function}"
    boundary = dataclasses.replace(names, culprit=call, entry=call, function=caller.function, where=where(caller),
                                   line=source_of(caller), caller="", caller_where="", caller_line="",
                                   package=package, op=frame.function)
    op = registered_op_for(brk.stack)
    if op is not None and op == (package, frame.function):
        return _fill(REGISTERED_OP, boundary, op_call_patch(caller, package, frame.function, fn))
    return _fill(recipes.get(WRAP_CUSTOM_OP), boundary, signature_patch(caller, package, frame.function, fn))


def suggest(brk: Break, advice: str) -> Fix:
    """The fix for ``brk``; ``advice`` names the recipe of the rule that
    recognised it (analysis/classify.py ``advice_for``)."""
    names = names_for(brk)
    local = _fill(recipes.get(advice), names)
    boundary = _boundary(brk, names)
    if boundary is None:
        return local
    boundary.secondary = local
    return boundary


def verified(brk: Break, rung: Rung, source: str = "") -> Fix:
    """The change a fix-ladder rung applied to ``brk``, as its fix."""
    recipe = recipes.get(rung.recipe)
    names = names_for(brk)
    # The rung changed ``where``: the body of its culprit (a function run once
    # before capture), or the call of its culprit there (a library function
    # made an op).
    function = rung.where.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    if function and rung.culprit and function != rung.culprit.rsplit(".", 1)[-1]:
        names = dataclasses.replace(names, culprit=rung.culprit, entry=rung.culprit, function=function)
    elif function:
        names = dataclasses.replace(names, function=function)
    op = registered_op_for(brk.stack) if rung.recipe == REGISTERED_OP.name else None
    if op is not None:
        names = dataclasses.replace(names, package=op[0], op=op[1])
    fix = _fill(recipe, names, rung.patch)
    fix.where = rung.where or fix.where
    fix.verified = True
    fix.verification = f"fix ladder step {rung.step}: {rung.result}" + (f" ({source})" if source else "")
    previous = brk.fix
    fix.secondary = previous if previous.recipe != fix.recipe and not previous.verified else previous.secondary
    return fix


def attach_verified(breaks: list[Break], rungs: list[Rung], source: str = "") -> int:
    """Make each change the ladder kept the fix of the break it removed (and of
    the breaks that follow from it); how many breaks got one."""
    by_id = {b.id: b for b in breaks}
    attached = 0
    for rung in rungs:
        if rung.result not in VERIFIED_RESULTS:
            continue
        brk = by_id.get(rung.break_id)
        if brk is None and rung.frame is not None:
            # The same break on another machine or release: its id may differ
            # (the culprit is read from Dynamo's message), its frame does not.
            key = frame_key(rung.frame)
            brk = next((b for b in breaks if b.gb_type == rung.gb_type and frame_key(b.site) == key), None)
        if brk is None:
            continue
        brk.fix = verified(brk, rung, source)
        for follower in breaks:
            if follower.caused_by == brk.id:
                follower.fix = brk.fix
        attached += 1
    return attached

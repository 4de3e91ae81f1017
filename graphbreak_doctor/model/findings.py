"""The findings model: the single contract between capture, analysis and renderers.

Plain dataclasses with a JSON form. Field order is the JSON order, lists are
kept in a stable order by the stages that fill them, and nothing run-specific
(timestamps, object addresses) is stored, so the same run gives byte-identical
JSON -- CI baselines depend on that.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from graphbreak_doctor.model.cache_facts import CacheFacts
from graphbreak_doctor.model.cudagraph import CudaGraphMap
from graphbreak_doctor.model.frame import Frame
from graphbreak_doctor.model.json_text import dumps, plain
from graphbreak_doctor.model.loader import build, expect
from graphbreak_doctor.model.sizes import SizedRun
from graphbreak_doctor.model.warm_up import WarmUp
from graphbreak_doctor.model.written_patch import PatchChange, PatchCheck, WrittenPatch
from graphbreak_doctor.text import LINES
from graphbreak_doctor.model.vocabulary import (
    COMPLETE,
    CRASHED,
    CUDAGRAPH_MODE,
    FULLGRAPH_MODES,
    INTERRUPTED,
    MAP_MODE,
    SIZES_MODE,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    TIMED_OUT,
)

# Dynamo's page about a graph break, by its registry id (GB0007).
DOC_URL = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{id}.html"


def doc_url(gb_id: str) -> str:
    """The documentation page of a break's registry id; "" without one."""
    return DOC_URL.format(id=gb_id.lower()) if gb_id else ""


@dataclass
class SourceExcerpt:
    """Source lines around a frame, read where the trace ran. The HTML report
    shows these and never reads a file on the machine that renders it: the
    paths in findings from elsewhere may name anything (``/etc/passwd``)."""

    file: str
    # Line number of lines[0].
    first: int
    lines: list[str] = field(default_factory=list)

    def covers(self, frame: Frame) -> bool:
        return self.file == frame.file and self.first <= frame.line < self.first + len(self.lines)


@dataclass
class Fix:
    """A suggested change: what to do, why, and an example."""

    recipe: str
    summary: str
    detail: str
    snippet: str
    # Added after schema 1 shipped (older JSON loads with the defaults):
    # where the change goes ("layer.py:42 (MLP.forward)").
    where: str = ""
    # For a break inside a third-party package the fix above is made where
    # the user's code calls into the package; this is the change inside it.
    secondary: Fix | None = None
    # The fix ladder applied this change and traced again (graphbreak_doctor.fix).
    verified: bool = False
    # How: "fix ladder step 2: fullgraph ok" (and the saved ladder it came from).
    verification: str = ""


@dataclass
class TargetInfo:
    """What was traced, in terms every renderer can show without knowing the
    model: a title, key shapes, notes, and the provider's other facts."""

    # Where it came from ("glm5:dense:0", "fixtures.breaks.subprocess_call:target").
    spec: str = ""
    # What built it: a provider ("glm5": the re-created layer; "factory", "call"), or a
    # framework and the model it served ("sglang/glm5", "vllm/qwen3moe").
    provider: str = ""
    # One line for headings ("GLM-5 (GlmMoeDsaForCausalLM) dense layer 0").
    title: str = ""
    # Qualified name of the traced callable.
    function: str = ""
    # Key shapes, shown as "name=value" ("hidden_size": 6144, "tokens": 128).
    shapes: dict[str, Any] = field(default_factory=dict)
    # Sentences a reader should see next to the verdict.
    notes: list[str] = field(default_factory=list)
    # Everything else the provider records (config file, weight formats, calls).
    facts: dict[str, Any] = field(default_factory=dict)
    # Registered ops piecewise mode splits the graph at.
    split_ops: list[str] = field(default_factory=list)
    # Registered ops the target's code calls, each with the library code that
    # runs inside it, where Dynamo does not trace ("sglang::fp4_gemm":
    # "FlashInfer's mm_fp4 ..."): why a clean trace is clean.
    opaque_ops: dict[str, str] = field(default_factory=dict)
    # What stood in for software that cannot run on this machine (a CUDA-only
    # binary's op schemas, ...): what the trace did not run for real.
    stand_ins: list[str] = field(default_factory=list)

    def display(self) -> str:
        """The title, else the spec, else the function."""
        return self.title or self.spec or self.function or "?"


@dataclass
class JitRequest:
    """A FlashInfer JIT build or load seen while tracing (emulated devices)."""

    name: str
    action: str
    break_id: str = ""


@dataclass
class Break:
    """One distinct graph break, merged over every time Dynamo hit it."""

    id: str
    category: str
    gb_id: str
    gb_type: str
    explanation: str
    hints: list[str]
    culprit: str
    # The call the actionable frame made that led to the break ("subprocess.check_output").
    via: str
    site: Frame
    actionable_frame: Frame | None
    package: str
    stack: list[Frame]
    count: int
    modes: list[str]
    fix: Fix
    reason: str = ""
    jit: list[JitRequest] = field(default_factory=list)
    # Id of the earlier break this one follows from (Dynamo could not resume).
    caused_by: str = ""
    # Added after schema 1 shipped: Dynamo's exception types on the failure's
    # chain, outermost first, and the facts that had to be read from Dynamo's
    # message text because its objects did not say ("culprit", "gb_type", ...).
    exceptions: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    # Added after schema 1 shipped: the source lines around the site and the
    # actionable frame, recorded by the trace (what the report shows).
    excerpts: list[SourceExcerpt] = field(default_factory=list)

    def excerpt_for(self, frame: Frame | None) -> SourceExcerpt | None:
        if frame is None:
            return None
        return next((e for e in self.excerpts if e.covers(frame)), None)

    def key(self) -> tuple[str, str, str, str]:
        """Identity that survives line shifts: used by baselines."""
        qual = self.actionable_frame.qualname if self.actionable_frame else ""
        return (self.category, self.package, qual, self.gb_type)


@dataclass
class Hazard:
    """A Dynamo warning that is not a break (e.g. an ignored lru_cache wrapper)."""

    kind: str
    message: str
    site: Frame | None
    count: int = 1


@dataclass
class UnparsedEvent:
    """A report of a break (live, or in an ingested log) the doctor could not
    turn into a :class:`Break`. Never dropped silently: counted in the findings,
    shown in the summary, and `check` fails (exit 3) while any is present."""

    source: str
    reason: str
    excerpt: str = ""


@dataclass
class FullgraphVerdict:
    ran: bool = False
    ok: bool | None = None
    error: str = ""
    break_id: str = ""
    crashed: bool = False
    # Where a crash happened in the user's code (a failure names its break).
    site: Frame | None = None
    # What else holds for the verdict: a captured graph whose run stopped at
    # a device value the emulated GPU does not know ("" for none).
    note: str = ""


@dataclass
class GraphInfo:
    """One FX graph Dynamo captured in explain mode."""

    index: int
    mode: str
    ops: int
    op_names: list[str] = field(default_factory=list)
    decompiled: str = ""
    # Piecewise mode: pieces SGLang's runner would cut the graph into.
    pieces: int = 0
    # Registered ops outside torch's own (aten, prims) the graph calls, as
    # 'ns::name': library code Dynamo did not trace into.
    registered_ops: list[str] = field(default_factory=list)
    # The collectives the graph calls, in graph order ('ns::name': torch's own,
    # or a framework's declared to the emulated world).
    collectives: list[str] = field(default_factory=list)


@dataclass
class DecompiledCode:
    """Bytecode Dynamo generated for a frame (the traced function or a resume
    function after a break), decompiled to Python by depyf."""

    name: str
    mode: str
    source: str


@dataclass
class RootCause:
    """Breaks explained by one function someone can change."""

    frame: Frame
    package: str
    break_ids: list[str]
    categories: list[str]


@dataclass
class Rung:
    """One step of the fix ladder (see graphbreak_doctor.fix)."""

    step: int
    break_id: str
    category: str
    gb_type: str
    site: str
    recipe: str
    # Several lines: a terminal shows them one by one (text.LINES).
    patch: str = field(metadata={LINES: True})
    where: str
    # "next failure", "fullgraph ok", "rejected" (undone) or "removed" (the
    # break is gone but the re-trace crashed).
    result: str
    detail: str = ""
    # Added after schema 1 shipped: "module.function" the change is about (the
    # library function made an op, the function run once before capture).
    culprit: str = ""
    # Added after schema 1 shipped: the break's site as a frame. A saved ladder
    # finds its break by id, else by gb_type and this frame (frames.frame_key).
    frame: Frame | None = None


@dataclass
class Region:
    """A ``torch.compile`` call the target's code made while it was built and
    run (graphbreak_doctor.capture.regions), traced with its own options."""

    # The compiled function ("sglang.srt.layers.moe.topk._biased_grouped_topk_postprocess").
    function: str
    site: Frame
    # The options the code gave torch.compile (fullgraph, dynamic, backend, mode).
    options: dict[str, Any] = field(default_factory=dict)
    # Per phase that entered it: calls, and the distinct shapes of the tensor
    # arguments ("[16, 6144], [16, 32, 1]"). Empty: only registered.
    calls: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, list[str]] = field(default_factory=dict)
    # How it was traced ("fullgraph" when it asks for fullgraph, else
    # "explain"; "" when no phase entered it) and with which phase's call.
    traced: str = ""
    traced_phase: str = ""
    # REGION_OK, REGION_BREAKS, REGION_FAILS or REGION_CRASHED ("" untraced).
    verdict: str = ""
    graphs: int = 0
    error: str = ""
    breaks: list[Break] = field(default_factory=list)
    # The calls that made Dynamo compile the region again while its phases ran
    # (a server calling it at several sizes): {"phase", "shapes", "reasons"},
    # the reasons being Dynamo's own guard failures, one per recompiled frame.
    recompiles: list[dict[str, Any]] = field(default_factory=list)
    # A fullgraph region compiled with a framework's piecewise backend (SGLang's
    # tc_piecewise runner): the ops its backend cuts the graph at, and how many
    # pieces the traced graph is cut into there (0: no graph was captured).
    split_ops: list[str] = field(default_factory=list)
    pieces: int = 0
    # The collectives its traced graphs call: {"op", "count", "as"}, "as"
    # being "split point" (a piecewise backend cuts the graph there: it runs
    # outside the compiled pieces) or "graph op" (inside a compiled graph).
    collectives: list[dict[str, Any]] = field(default_factory=list)

    @property
    def entered(self) -> bool:
        return bool(self.calls)


@dataclass
class FixOutcome:
    """Where the fix ladder ended (see graphbreak_doctor.fix)."""

    ok: bool = False
    stopped: str = ""
    # Recipes of the rungs that stayed applied, in order.
    recipes: list[str] = field(default_factory=list)
    steps: int = 0
    max_steps: int = 0
    # Real tensors only: do the fixed, compiled outputs equal eager outputs?
    outputs_equal_eager: bool | None = None
    # The id of the break the ladder stopped at ("" when fullgraph succeeded
    # or the last re-trace crashed).
    stopped_break: str = ""
    # The kept changes as a written patch makes them, in order.
    changes: list[PatchChange] = field(default_factory=list)
    # What --write-patch wrote (None: not asked).
    patch: WrittenPatch | None = None


@dataclass
class Findings:
    schema_version: int = SCHEMA_VERSION
    target: TargetInfo = field(default_factory=TargetInfo)
    environment: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    modes: list[str] = field(default_factory=list)
    fullgraph: FullgraphVerdict = field(default_factory=FullgraphVerdict)
    graph_count: int = 0
    graphs: list[GraphInfo] = field(default_factory=list)
    breaks: list[Break] = field(default_factory=list)
    hazards: list[Hazard] = field(default_factory=list)
    root_causes: list[RootCause] = field(default_factory=list)
    jit_requests: list[JitRequest] = field(default_factory=list)
    ladder: list[Rung] = field(default_factory=list)
    fix: FixOutcome | None = None
    # Added after schema 1 shipped; older JSON without it loads as [].
    resume_code: list[DecompiledCode] = field(default_factory=list)
    # Added after schema 1 shipped; older JSON without it loads as [].
    unparsed_events: list[UnparsedEvent] = field(default_factory=list)
    # How the trace ended (COMPLETE, or CRASHED / TIMED_OUT / INTERRUPTED when a
    # worker did not finish: then ``fullgraph.error`` says why in one line).
    outcome: str = COMPLETE
    # Added after schema 1 shipped: distinct breaks per fact read from
    # Dynamo's message text, not from its objects ({"culprit": 2}).
    message_fallbacks: dict[str, int] = field(default_factory=dict)
    # Added after schema 1 shipped: the torch.compile regions the target's own
    # code registered and entered (a serving framework's compile map).
    regions: list[Region] = field(default_factory=list)
    # Added after schema 1 shipped: where the findings came from (traced now,
    # or the findings cache); None in findings that do not say.
    cache: CacheFacts | None = None
    # Added after schema 1 shipped: the target called at the server's sizes
    # in one Dynamo session (--sizes); None when not asked.
    sized: SizedRun | None = None
    # Added after schema 1 shipped: the eager warm-up before the trace, and
    # whether the first failure depends on it; None in findings that do not say.
    warm_up: WarmUp | None = None
    # Schema 2: the CUDA-graph map (trace --cudagraph, trace --model): what
    # the server captures into CUDA graphs and the capture hazards found;
    # None when not asked.
    cudagraphs: CudaGraphMap | None = None

    def incomplete(self) -> str:
        """Why this diagnosis cannot be vouched for, as a sentence; "" when it is whole."""
        if self.outcome in (TIMED_OUT, INTERRUPTED):
            return f"the trace {self.outcome}: {self.fullgraph.error}"
        if self.outcome == CRASHED:
            return f"the trace crashed: {self.fullgraph.error}"
        if self.fullgraph.crashed:
            return f"the target crashed under Dynamo (not a graph break): {self.fullgraph.error}"
        if self.unparsed_events:
            n = len(self.unparsed_events)
            return (f"{n} break report{'s' if n != 1 else ''} could not be parsed (first: "
                    f"{self.unparsed_events[0].reason}); the breaks found are incomplete")
        return ""

    def break_by_id(self, break_id: str) -> Break | None:
        return next((b for b in self.breaks if b.id == break_id), None)

    def count_fallbacks(self) -> None:
        """Fill ``message_fallbacks`` from the breaks."""
        counts: dict[str, int] = {}
        for b in self.breaks:
            for fact in b.fallbacks:
                counts[fact] = counts.get(fact, 0) + 1
        self.message_fallbacks = dict(sorted(counts.items()))

    def clean(self) -> bool:
        """Traced to the end with no break and no fullgraph failure."""
        fg = self.fullgraph
        return not self.breaks and not fg.crashed and (fg.ok or not fg.ran) and not self.unparsed_events

    def registered_ops(self) -> list[str]:
        """Every registered op the captured graphs call (see GraphInfo), in order."""
        return list(dict.fromkeys(op for g in self.graphs for op in g.registered_ops))

    def categories(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for b in self.breaks:
            counts[b.category] = counts.get(b.category, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return plain(self)

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Findings:
        expect(data, dict, "findings")
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(
                f"findings schema version {version!r} is not supported "
                f"(this graphbreak-doctor reads versions {', '.join(map(str, READABLE_VERSIONS))})"
            )
        findings = build(cls, _upgrade(data))
        known = (*FULLGRAPH_MODES, "explain", MAP_MODE, SIZES_MODE, CUDAGRAPH_MODE)
        odd = [m for m in findings.modes + [m for b in findings.breaks for m in b.modes] if m not in known]
        if odd:  # the gate counts breaks per mode: a mode it does not know would check nothing
            raise ValueError(f"unknown trace mode {odd[0]!r} (the modes are {', '.join(known)})")
        return findings

    @classmethod
    def from_json(cls, text: str) -> Findings:
        return cls.from_dict(json.loads(text))


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Findings of an older schema version read as the current one: version 1
    has no CUDA-graph map (read as none), and findings written before
    ``target`` was a TargetInfo kept it as a free dict: its other keys become
    facts, its ladder outcome the ``fix`` field."""
    data = {**data, "schema_version": SCHEMA_VERSION}
    target = data.get("target")
    if not isinstance(target, dict):
        return data
    known = {f.name for f in dataclasses.fields(TargetInfo)}
    extra = {k: v for k, v in target.items() if k not in known}
    if not extra:
        return data
    upgraded = dict(data)
    fix = extra.pop("fix", None)
    if isinstance(fix, dict) and "fix" not in data:
        upgraded["fix"] = fix
    upgraded["target"] = {**{k: v for k, v in target.items() if k in known},
                          "facts": {**target.get("facts", {}), **extra}}
    return upgraded

"""What the readers found in all input files, and the findings made from it.

Readers hand over raw events (the capture's ``BreakEvent``), crashes, graphs,
per-frame compile statistics and what they could not parse. Events that are
the same in every field are stored once with a count, so memory grows with
the number of distinct reports, not with the size of the input. The findings
are made by the same ``assemble`` as a live trace: classification,
root causes and fixes are not done twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from graphbreak_doctor.analysis.assemble import assemble
from graphbreak_doctor.capture.events import BreakEvent, with_causes
from graphbreak_doctor.capture.result import ModeResult
from graphbreak_doctor.model import Findings, GraphInfo, TargetInfo, UnparsedEvent
from graphbreak_doctor.ingest.dynamo_text import Crash, Unparsed, parse_report

# Unparsed blocks kept with their excerpt; past that they are only counted.
MAX_UNPARSED_SHOWN = 50
_MAX_NOTES = 10
ENVIRONMENT_KEYS = ("python", "torch", "flashinfer", "sglang")


@dataclass
class FileRecord:
    path: str
    format: str
    compression: str = ""
    rank: int | None = None
    lines: int = 0
    reports: int = 0
    unparsed: int = 0
    # Why the file broke off before its end (a compressed file copied while written).
    cut: str = ""
    # Lines longer than the line cut (source.MAX_LINE), by number: only their start was read (a few kept).
    long_lines: list[int] = field(default_factory=list)
    # Ranks named in the file's lines ("[rank3]:" prefixes, TORCH_TRACE metadata).
    ranks: set[int] = field(default_factory=set)
    # (gb_type, site) of the events read from this file, first-seen order.
    sites: dict[tuple[str, str], None] = field(default_factory=dict)

    def all_ranks(self) -> list[int]:
        return sorted(self.ranks | ({self.rank} if self.rank is not None else set()))


@dataclass
class FrameStats:
    """Compilations of one code object (TORCH_TRACE ``compilation_metrics``)."""

    function: str
    file: str
    line: int
    compiles: int = 0
    graphs: int = 0
    ops: int = 0
    restarts: int = 0
    # Distinct first lines of Dynamo's restart and failure reasons (a few).
    restart_reasons: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "file": self.file, "line": self.line, "compiles": self.compiles,
                "graphs": self.graphs, "ops": self.ops, "restarts": self.restarts,
                "restart_reasons": self.restart_reasons, "failures": self.failures}


def _event_key(e: BreakEvent) -> tuple:
    m = e.message
    return (e.mode, e.gb_type, m.explanation, m.context, tuple(m.hints), m.doc_id,
            tuple(e.stack), e.site, e.duplicate)


def _site(e: BreakEvent) -> tuple[str, str]:
    return (e.gb_type, e.site.location() if e.site else "<unknown>:0")


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


class Collection:
    def __init__(self) -> None:
        self.files: list[FileRecord] = []
        # mode -> event key -> [event, times seen]; dicts keep first-seen order.
        self.events: dict[str, dict[tuple, list]] = {"explain": {}, "fullgraph": {}}
        self.crashes: list[str] = []
        self.graph_ops: list[int] = []
        self.frames: dict[tuple[str, str, int], FrameStats] = {}
        self.unparsed: list[UnparsedEvent] = []
        self.unparsed_total = 0
        self.environment: dict[str, str] = {}
        self.devices: set[str] = set()
        self._parsed: dict[str, BreakEvent | Crash | Unparsed] = {}

    # -- what readers call
    def file(self, path: str, fmt: str, compression: str, rank: int | None) -> FileRecord:
        record = FileRecord(path, fmt, compression, rank)
        self.files.append(record)
        return record

    def report(self, record: FileRecord, lines: list[str], source: str, mode: str,
               resolve: Callable[[BreakEvent], BreakEvent | None] | None = None) -> BreakEvent | Crash | None:
        """Parse one report (cached by its text: logs repeat themselves) and keep it.

        ``resolve`` gives the event to keep now (the parsed one, or one made
        from it), or None: the caller keeps it for later."""
        record.reports += 1
        text = "\n".join(lines)
        outcome = self._parsed.get(text)
        if outcome is None:
            outcome = parse_report(lines, mode)
            self._parsed[text] = outcome
        if isinstance(outcome, Unparsed):
            self.unparsed_block(record, source, outcome.reason, lines)
            return None
        if isinstance(outcome, Crash):
            return outcome
        keep = outcome if resolve is None else resolve(outcome)
        if keep is not None:
            self.event(record, keep)
        return outcome

    def event(self, record: FileRecord, event: BreakEvent) -> None:
        """Keep ``event``, after the breaks it was raised from (its causes),
        as the live capture lists them; a follow-up is linked to the cause
        kept for it."""
        kept: BreakEvent | None = None
        for each in with_causes(event):
            if kept is not None and each.cause is not kept:
                each = dataclasses.replace(each, cause=kept)
            slot = self.events[each.mode].setdefault(_event_key(each), [each, 0])
            slot[1] += 1
            kept = slot[0]
            record.sites.setdefault(_site(each), None)

    def crash(self, error: str) -> None:
        if error not in self.crashes:
            self.crashes.append(error)

    def unparsed_block(self, record: FileRecord, source: str, reason: str, lines: list[str]) -> None:
        record.unparsed += 1
        self.unparsed_total += 1
        if len(self.unparsed) < MAX_UNPARSED_SHOWN:
            excerpt = "\n".join(line[:240] for line in lines[:6])
            self.unparsed.append(UnparsedEvent(source=source, reason=reason, excerpt=excerpt))

    def cut(self, record: FileRecord, why: str) -> None:
        record.cut = why
        self.unparsed_block(record, record.path, f"the file ends early ({why}); what came before was read", [])

    def long_line(self, record: FileRecord, number: int) -> None:
        if len(record.long_lines) < _MAX_NOTES:
            record.long_lines.append(number)

    def frame(self, function: str, file: str, line: int) -> FrameStats:
        key = (function, file, line)
        stats = self.frames.get(key)
        if stats is None:
            stats = self.frames[key] = FrameStats(function, file, line)
        return stats

    @staticmethod
    def note(notes: list[str], text: str) -> None:
        if text and text not in notes and len(notes) < _MAX_NOTES:
            notes.append(text)

    # -- the findings
    def findings(self, paths: list[str], fmt: str) -> Findings:
        results = self._results()
        environment = {k: self.environment.get(k, "") for k in ENVIRONMENT_KEYS}
        device = {"name": _device_name(self.devices), "emulated": False, "ingested": True}
        findings = assemble(results, target=self._target(paths, fmt), environment=environment, device=device)
        findings.unparsed_events = list(self.unparsed)
        if self.unparsed_total > len(self.unparsed):
            findings.unparsed_events.append(UnparsedEvent(
                source="(more)", reason=f"{self.unparsed_total - len(self.unparsed)} more reports could not be parsed",
            ))
        ids = {(b.gb_type, b.site.location()): b.id for b in findings.breaks}
        for entry, record in zip(findings.target.facts["ingested"]["files"], self.files):
            entry["breaks"] = list(dict.fromkeys(ids[s] for s in record.sites if s in ids))
        return findings

    def _results(self) -> list[ModeResult]:
        explain = _repeated(self.events["explain"].values())
        fullgraph = _repeated(self.events["fullgraph"].values())
        results: list[ModeResult] = []
        graph_mode = "fullgraph" if fullgraph and not explain else "explain"
        graphs = [GraphInfo(index=i, mode=graph_mode, ops=ops) for i, ops in enumerate(self.graph_ops)]
        if explain or (graphs and graph_mode == "explain") or (self.crashes and not fullgraph):
            results.append(ModeResult(mode="explain", events=explain, graphs=graphs if graph_mode == "explain" else [],
                                      ok=True))
        if fullgraph:
            results.append(ModeResult(mode="fullgraph", events=fullgraph, ok=False, error=fullgraph[0].gb_type,
                                      graphs=graphs if graph_mode == "fullgraph" else []))
        if self.crashes:
            last = results[-1]
            last.ok, last.crashed = False, True
            last.error = self.crashes[0]
        return results

    def _target(self, paths: list[str], fmt: str) -> TargetInfo:
        ranks = sorted({r for f in self.files for r in f.all_ranks()})
        files = [{"path": f.path, "format": f.format, "compression": f.compression or "none",
                  "rank": f.all_ranks()[0] if len(f.all_ranks()) == 1 else None, "ranks": f.all_ranks(),
                  "lines": f.lines, "reports": f.reports, "unparsed": f.unparsed, "long_lines": f.long_lines}
                 for f in self.files]
        frames = sorted(self.frames.values(), key=lambda s: (s.file, s.line, s.function))
        ingested = {
            "format": fmt,
            "files": files,
            "ranks": ranks,
            "frames": [s.to_dict() for s in frames],
            "restarts": sum(s.restarts for s in frames),
            "crashes": list(self.crashes),
            "unparsed": self.unparsed_total,
        }
        return TargetInfo(spec="ingest:" + ",".join(paths), provider="ingest",
                          title=f"what {', '.join(paths)} left behind", facts={"ingested": ingested})


def _repeated(slots: Iterable[list]) -> list[BreakEvent]:
    """Each distinct event, then its repeats in Dynamo's own form for a repeated
    break: the site only (``duplicate``). The analysis files a repeat under the
    break it just made for that site, so counts are exact and the break is
    analysed once, however often a long log repeats it."""
    out: list[BreakEvent] = []
    for event, times in slots:
        out.append(event)
        if times > 1:
            again = dataclasses.replace(event, duplicate=True) if event.site is not None else event
            out.extend([again] * (times - 1))
    return out


def _device_name(devices: set[str]) -> str:
    for name in ("cuda", "xpu", "mps", "cpu"):
        if name in devices:
            return name
    return "unknown"

"""TORCH_TRACE files: PyTorch's structured compile log, the file tlparse reads.

torch/_logging/_internal.py writes one record per line -- a glog prefix, then
a JSON object whose first key is the record's kind -- and the record's
payload, if any, on the following lines, each starting with a tab. A
process writes its own file (``dedicated_log_torch_trace_[rank_N_]*.log``);
under torch.distributed every record also carries ``"rank"``.

Kinds read here (every other record is skipped without decoding it):

- ``dynamo_start``: a frame's compilation begins (ids: ``frame_id``,
  ``frame_compile_id``);
- artifact ``dynamo_graph_break_reason``: a handled graph break or a skipped
  frame, logged wherever the ``graph_breaks`` log is -- the events the live
  capture's listener hears (mode explain);
- artifact ``dynamo_error``: the traceback of an exception that ended a
  compilation (torch/_dynamo/convert_frame.py, ``_compile``). With
  ``fullgraph=True`` that is the failure itself; without it, the frame was
  skipped and a ``dynamo_graph_break_reason`` of the same compilation reports
  it (before the error, or right after it), so it is not counted twice;
- ``dynamo_output_graph``: a captured FX graph;
- ``compilation_metrics``: per compilation, the code object, op count,
  restart reasons and failure (used for the break when no ``dynamo_error``
  was logged);
- artifact ``torch_version``; ``describe_tensor`` only for the device type.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from graphbreak_doctor.capture.events import BreakEvent
from graphbreak_doctor.ingest.collection import Collection, FileRecord, first_line
from graphbreak_doctor.ingest.dynamo_text import EXC_HEADER, Crash, chained_names, with_chain

ENVELOPE = re.compile(r"^(?:\[rank\d+\]:)?[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] \{\"")
_KINDS = (
    ('{"dynamo_start": ', "start"),
    ('{"artifact": {"name": "dynamo_graph_break_reason"', "break"),
    ('{"artifact": {"name": "dynamo_error"', "error"),
    ('{"dynamo_output_graph": ', "graph"),
    ('{"compilation_metrics": ', "metrics"),
    ('{"artifact": {"name": "torch_version"', "version"),
)
_DEVICE = re.compile(r"\"device\": \"device\(type='(\w+)'")
_RANK = re.compile(r"\"rank\": (\d+)")
_LAST_EXCEPTION = re.compile(r"^(?P<cls>[A-Za-z_][\w.]*(?:Error|Exception|Failed|Unsupported)\w*): ?(?P<rest>.*)$")
MAX_PAYLOAD_LINES = 20000
_RANK_PROBES = 64


def looks_like_trace(first_lines: list[str]) -> bool:
    return bool(first_lines) and ENVELOPE.match(first_lines[0]) is not None


@dataclass
class _Compile:
    """One compilation of one frame, from its dynamo_start on."""

    breaks: bool = False
    error: bool = False
    graphs: int = 0


@dataclass
class _Pending:
    cid: tuple
    event: BreakEvent


@dataclass
class TraceReader:
    collection: Collection
    record: FileRecord
    compiles: dict[tuple, _Compile] = field(default_factory=dict)
    pending: list[_Pending] = field(default_factory=list)
    # The record whose payload is being read: (kind, metadata, line number).
    current: tuple[str, dict, int] | None = None
    payload: list[str] | None = None
    stray: list[str] = field(default_factory=list)
    stray_at: int = 0
    envelopes: int = 0

    def read(self, lines: Iterable[str]) -> None:
        number = 0
        for number, line in enumerate(lines, 1):
            if line.startswith("\t"):
                if self.payload is not None and len(self.payload) < MAX_PAYLOAD_LINES:
                    self.payload.append(line[1:])
                continue
            self._dispatch()
            self._envelope(number, line)
        self._dispatch()
        self._stray_end()
        self.record.lines = number
        self._resolve_pending()

    def _source(self, number: int) -> str:
        return f"{self.record.path}:{number}"

    def _envelope(self, number: int, line: str) -> None:
        start = line.find("] {")
        if start < 0 or not ENVELOPE.match(line):
            if line.strip():
                if not self.stray:
                    self.stray_at = number
                self.stray.append(line)
            return
        self._stray_end()
        meta_text = line[start + 2:]
        self.envelopes += 1
        if self.envelopes <= _RANK_PROBES and (m := _RANK.search(meta_text)):
            self.record.ranks.add(int(m.group(1)))
        kind = next((k for prefix, k in _KINDS if meta_text.startswith(prefix)), None)
        if kind is None:
            if meta_text.startswith('{"describe_tensor": ') and (d := _DEVICE.search(meta_text)):
                self.collection.devices.add(d.group(1))
            return
        try:
            meta = json.loads(meta_text)
        except (ValueError, RecursionError):
            self.collection.unparsed_block(self.record, self._source(number),
                                           "a TORCH_TRACE record that is not valid JSON (cut short?)", [line])
            return
        self.current = (kind, meta, number)
        self.payload = [] if "has_payload" in meta else None
        if self.payload is None:
            self._dispatch()

    def _stray_end(self) -> None:
        if self.stray:
            self.collection.unparsed_block(
                self.record, self._source(self.stray_at),
                f"{len(self.stray)} line(s) that are not TORCH_TRACE records", self.stray)
            self.stray = []

    def _dispatch(self) -> None:
        if self.current is None:
            return
        (kind, meta, number), payload = self.current, self.payload or []
        self.current, self.payload = None, None
        # Each payload carries its md5 (torch/_logging/_internal.py, trace_structured):
        # a record cut short, or cut off where the file ends, does not match it.
        digest = meta.get("has_payload")
        if kind in ("break", "error") and digest and hashlib.md5("\n".join(payload).encode()).hexdigest() != digest:
            self.collection.unparsed_block(self.record, self._source(number),
                                           "a TORCH_TRACE record whose payload is cut short (its md5 does not match)",
                                           payload)
            return
        cid = (meta.get("frame_id"), meta.get("frame_compile_id"), meta.get("compiled_autograd_id"))
        getattr(self, f"_on_{kind}")(cid, meta, payload, number)

    def _on_start(self, cid: tuple, meta: dict, payload: list[str], number: int) -> None:
        self._resolve_pending()
        self.compiles[cid] = _Compile()

    def _on_break(self, cid: tuple, meta: dict, payload: list[str], number: int) -> None:
        state = self.compiles.setdefault(cid, _Compile())
        state.breaks = True
        # A skipped frame's error came first: this report is that break.
        self.pending = [p for p in self.pending if p.cid != cid]
        self.collection.report(self.record, payload, self._source(number + 1), "explain")

    def _on_error(self, cid: tuple, meta: dict, payload: list[str], number: int) -> None:
        state = self.compiles.setdefault(cid, _Compile())
        state.error = True
        at = next((i for i in range(len(payload) - 1, -1, -1) if EXC_HEADER.match(payload[i])), None)
        if at is None:
            last = next((m for t in reversed(payload) if (m := _LAST_EXCEPTION.match(t))), None)
            if last is not None:
                self.collection.crash(f"{last.group('cls').rsplit('.', 1)[-1]}: {last.group('rest').strip()}")
            else:
                self.collection.unparsed_block(self.record, self._source(number + 1),
                                               "a Dynamo error without its exception line (cut short?)", payload)
            return
        self._thrown(cid, state, payload[at:], number + 1 + at, chained_names(payload[:at]))

    def _thrown(self, cid: tuple, state: _Compile, lines: list[str], number: int,
                chained: list[str] | None = None) -> None:
        def hold(event: BreakEvent) -> None:
            if chained and event.exceptions:
                event = with_chain(event, chained)
            # Explain mode reports a skipped frame as a graph break of its own.
            if not state.breaks:
                self.pending.append(_Pending(cid, event))
            return None

        outcome = self.collection.report(self.record, lines, self._source(number), "fullgraph", resolve=hold)
        if isinstance(outcome, Crash):
            self.collection.crash(outcome.error)

    def _on_graph(self, cid: tuple, meta: dict, payload: list[str], number: int) -> None:
        self.compiles.setdefault(cid, _Compile()).graphs += 1

    def _on_metrics(self, cid: tuple, meta: dict, payload: list[str], number: int) -> None:
        m: dict[str, Any] = meta.get("compilation_metrics") or {}
        state = self.compiles.setdefault(cid, _Compile())
        stats = self.collection.frame(str(m.get("co_name") or "?"), str(m.get("co_filename") or "?"),
                                      int(m.get("co_firstlineno") or 0))
        stats.compiles += 1
        stats.graphs += state.graphs
        ops = m.get("graph_op_count")
        stats.ops += ops if isinstance(ops, int) else 0
        for i in range(state.graphs):
            self.collection.graph_ops.append(ops if i == 0 and isinstance(ops, int) else 0)
        state.graphs = 0
        reasons = m.get("restart_reasons") or []
        stats.restarts += len(reasons)
        for reason in reasons:
            Collection.note(stats.restart_reasons, first_line(str(reason)))
        env = self.collection.environment
        if m.get("python_version") and not env.get("python"):
            env["python"] = str(m["python_version"]).split()[0]
        if m.get("pytorch_version") and not env.get("torch"):
            env["torch"] = str(m["pytorch_version"])
        fail_type, fail_reason = m.get("fail_type"), str(m.get("fail_reason") or "")
        if not fail_type:
            return
        Collection.note(stats.failures, f"{fail_type}: {first_line(fail_reason)}")
        if state.error:
            return
        # No dynamo_error artifact for this compilation: the metrics are all there is.
        if fail_type == "Unsupported":
            where = m.get("fail_user_frame_filename")
            lines = [f"torch._dynamo.exc.Unsupported: {fail_reason}"] if fail_reason else []
            lines = "\n".join(lines).splitlines()
            if where:
                lines += ["", "from user code:", f'  File "{where}", line {m.get("fail_user_frame_lineno") or 0}, in <unknown>']
            self._thrown(cid, state, lines, number)
        else:
            self.collection.crash(f"{fail_type}: {first_line(fail_reason)}")

    def _on_version(self, cid: tuple, meta: dict, payload: list[str], number: int) -> None:
        try:
            version = json.loads("\n".join(payload)).get("pytorch_version")
        except (ValueError, AttributeError, RecursionError):
            # Not a version record after all: the version then comes from
            # compilation_metrics, or stays unknown (shown as such).
            version = None
        if version and not self.collection.environment.get("torch"):
            self.collection.environment["torch"] = str(version)

    def _resolve_pending(self) -> None:
        for p in self.pending:
            self.collection.event(self.record, p.event)
        self.pending = []

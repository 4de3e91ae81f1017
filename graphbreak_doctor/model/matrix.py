"""What a matrix run found: one result per cell (versions x device x layer),
the diffs between neighbouring versions, and a bisection when one ran.

Plain data with a JSON form (graphbreak_doctor.matrix runs the cells); the
renderers (render/matrix_*.py) read only this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphbreak_doctor.model.findings import Findings
from graphbreak_doctor.model.json_text import dumps
from graphbreak_doctor.model.vocabulary import CRASHED, TIMED_OUT
from graphbreak_doctor.text import counted

# 2: the framework axis is one (``framework``, ``releases``; a cell's
# ``framework``, ``release`` and ``said``) in place of one key per framework
# (``sglang``, ``vllm``; ``sglang_said``, ``sglang_rules``, ``vllm_said``).
MATRIX_SCHEMA_VERSION = 2
KIND = "graphbreak-doctor matrix"

# A cell's status; CRASHED and TIMED_OUT are a trace's outcomes (vocabulary).
OK, FAILED, NOT_RUNNABLE = "ok", "failed", "not runnable"
# The release refuses the cell's launch arguments (--<framework>-args): its own message.
NOT_AVAILABLE = "not available"
# The layer of a cell that maps a framework's model forward (--model).
MODEL = "model"
# A matrix of another provider's targets (--target M:F): each cell's layer is its target.
TARGET = "target"


@dataclass
class Cell:
    flashinfer: str
    device: str
    layer: str  # dense, moe, MODEL (the compile map of the model forward), or a TARGET matrix's target
    status: str  # OK, FAILED, CRASHED, TIMED_OUT, NOT_RUNNABLE or NOT_AVAILABLE
    reason: str = ""  # one line: the first failure, why it did not run, or SGLang's refusal
    category: str = ""  # FAILED: the category of the break fullgraph stopped at
    function: str = ""  # ... and the function it is in
    breaks: int = 0  # distinct breaks (explain mode)
    setup_seconds: float = 0.0  # its environment's, this run
    findings: Findings | None = None
    # A MODEL cell: how the launch runs its prefill, as the release resolved it
    # (the first phase of its framework's server: SGLang's extend, vLLM's
    # profile run); the fullgraph verdict of the prefill forward where the
    # launch compiles it on a path of its own (SGLang's tc_piecewise: "ok" or
    # "fails: <category> (<function>)"; "" where it is not compiled); what the
    # framework said while it resolved the launch, as its own lines say it
    # (Framework.said_lines: what it logged about compiling, the rules of its
    # code that changed a compile field); and the torch.compile regions the phases entered.
    prefill: str = ""
    prefill_fullgraph: str = ""
    said: list[str] = field(default_factory=list)
    regions: list[dict[str, Any]] = field(default_factory=list)  # function, phases, options, verdict
    registered: int = 0  # regions registered that no phase entered
    # What the cell's environment could not hold as the release asks (a
    # package the release and the FlashInfer disagree on: its manifest's notes).
    environment: list[str] = field(default_factory=list)
    # What else the cell's line says: how it ran (retried once after a lost
    # Ray worker), a mode that crashed beside the verdict it does not change.
    notes: list[str] = field(default_factory=list)
    host: str = ""  # the machine its workers ran on (a Ray node's host name, or this one's)
    # What the traced code wrote to stdout/stderr in the cell's workers (one
    # section per mode); kept in the matrix's log file, not in its JSON.
    log: str = ""
    # The torch the cell's environment holds, where the matrix has a torch
    # axis (--torch); "" = the matrix's own (MatrixResult.torch).
    torch: str = ""
    # The serving framework whose release the cell's environment holds (its
    # name: the matrix's --<name> axis), and that release; "" for a cell
    # without one (the reference layer, a provider's targets without a framework).
    framework: str = ""
    release: str = ""

    @property
    def row(self) -> tuple[str, str, str, str, str]:
        """The table row it is in: (framework, release, flashinfer, layer, torch)."""
        return self.framework, self.release, self.flashinfer, self.layer, self.torch

    @property
    def versions(self) -> str:
        """The row label: 'sglang 0.5.9 + flashinfer 0.6.3', 'vllm 0.33.0 + flashinfer 0.7.4' or
        'flashinfer 0.7.4' (+ 'torch 2.14.1')."""
        return ((f"{self.framework} {self.release} + " if self.framework else "") + f"flashinfer {self.flashinfer}"
                + (f" + torch {self.torch}" if self.torch else ""))

    @property
    def slug(self) -> str:
        what = f"{self.framework}-{self.release}-" if self.framework else ""
        torch = f"-torch-{self.torch}" if self.torch else ""
        return f"{what}flashinfer-{self.flashinfer}{torch}-{self.device}-{self.layer}"

    @property
    def runnable(self) -> bool:
        return self.status != NOT_RUNNABLE

    @property
    def decided(self) -> bool:
        """Traced to a verdict: fullgraph captured the layer or stopped at a
        break. A crash, a timeout or a cell that did not run says nothing
        about the versions (bisection steps over it)."""
        return self.status in (OK, FAILED)

    def verdict(self) -> str:
        """What bisection compares: 'ok', 'failed: <category>', 'crashed', ..."""
        return f"{FAILED}: {self.category}" if self.status == FAILED else self.status

    def launch_text(self) -> list[str]:
        """A MODEL cell: the prefill, its fullgraph verdict and the framework's word, as parts of a line."""
        return ([f"prefill: {self.prefill or 'not said'}"
                 + (f" -> fullgraph {self.prefill_fullgraph}" if self.prefill_fullgraph else "")] + self.said)

    def map_text(self) -> str:
        """A MODEL cell: the prefill, its fullgraph verdict, the framework's word, the regions."""
        parts = self.launch_text()
        verdicts: dict[str, int] = {}
        for r in self.regions:
            verdicts[r["verdict"] or "not traced"] = verdicts.get(r["verdict"] or "not traced", 0) + 1
        shown = ", ".join(f"{n} {v}" for v, n in verdicts.items())
        parts.append(f"{counted(len(self.regions), 'region')} entered" + (f" ({shown})" if shown else ""))
        graphs = self.cudagraph_text()
        if graphs:
            parts.append(graphs)
        return "; ".join(parts)

    def cudagraph_text(self) -> str:
        """A MODEL cell's CUDA-graph map in a few words: per captured phase its
        backend and segments (at its largest captured size), then the hazards."""
        found = self.findings.cudagraphs if self.findings is not None else None
        if found is None:
            return ""
        phases = []
        for p in found.phases:
            done = [c for c in p.captures if not c.error]
            if done:
                phases.append(f"{p.phase} {p.backend} ({counted(done[-1].segments, 'segment')})")
            elif p.captures:
                phases.append(f"{p.phase} {p.backend} (capture did not finish)")
        hazards = found.hazards()
        kinds = sorted({h.category for h in hazards})
        said = f"{counted(len(hazards), 'capture hazard')} ({', '.join(kinds)})" if hazards else "no capture hazard"
        if found.error:  # the capture stopped: what it found before is all there is
            said = f"{said} found before it stopped: {found.error}"
        return f"CUDA graphs: {', '.join(phases) or 'none captured'}, {said}"

    def text(self, torch: str) -> str:
        """The table cell: fullgraph ok / the first failure's category / breaks;
        a MODEL cell: its compile map in one line; then the cell's notes."""
        return "; ".join([self._verdict_text(torch), *self.notes])

    def _verdict_text(self, torch: str) -> str:
        if self.status == NOT_AVAILABLE:
            return f"not available in this release: {self.reason}"
        if self.layer == MODEL and self.status in (OK, FAILED):
            return ("OK" if self.status == OK else "FAILED") + f": {self.map_text()}"
        if self.status == OK:
            return f"OK, {counted(self.breaks, 'break')}"
        if self.status == FAILED:
            where = f" ({self.function})" if self.function else ""
            return f"FAILED: {self.category}{where}, {counted(self.breaks, 'break')}"
        if self.status == NOT_RUNNABLE:
            return f"not runnable on torch {torch}: {self.reason}"
        # A cell that stopped says what its environment could not hold as the release asks.
        held = [f"environment: {note}" for note in self.environment]
        if self.layer == MODEL and self.prefill:  # the map stopped after the release resolved the launch
            return "; ".join([f"{self.status.upper()}: {self.reason}", *self.launch_text(), *held])
        return "; ".join([f"{self.status.upper()}: {self.reason}", *held])

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework, "release": self.release, "flashinfer": self.flashinfer, "device": self.device,
            "layer": self.layer,
            "status": self.status, "verdict": self.verdict(), "reason": self.reason, "category": self.category,
            "function": self.function, "breaks": self.breaks, "setup_seconds": round(self.setup_seconds, 1),
            "torch": self.torch,
            "environment": self.environment, "notes": self.notes, "host": self.host,
            **({"prefill": self.prefill, "prefill_fullgraph": self.prefill_fullgraph, "regions": self.regions,
                "registered": self.registered, "said": self.said} if self.layer == MODEL else {}),
            "findings": self.findings.to_dict() if self.findings is not None else None,
        }


@dataclass
class NeighbourDiff:
    """Two cells that differ in one version (same device and layer)."""

    axis: str  # the framework's name ("sglang", "vllm", ...), "flashinfer" or "torch"
    a: str  # the older version
    b: str  # the newer one
    device: str
    layer: str
    fixed: str  # the other axis's value, as a label
    summary: str  # one line
    diff: dict[str, Any]  # model.diff.FindingsDiff.to_dict()


@dataclass
class Bisection:
    axis: str
    low: str
    high: str
    probes: list[tuple[str, str]] = field(default_factory=list)  # (version, verdict) in the order run
    first: str = ""  # the first release whose verdict differs from ``low``'s ("" if none found)
    line: str = ""  # what it found, in one line
    candidates: int = 0  # releases in the range


@dataclass
class MatrixResult:
    layer: str
    impl: str
    mode: str
    torch: str
    flashinfer: list[str]
    devices: list[str]
    # The serving framework of the framework axis (its name; "" for none) and its releases (--<name> V1,...).
    framework: str = ""
    releases: list[str] = field(default_factory=list)
    # The launch arguments every cell's framework ran with (--<framework>-args; [] = the defaults).
    launch: list[str] = field(default_factory=list)
    model: str = ""  # --model: the served model's name ("" = GLM-5-NVFP4, in matrices written before it was kept)
    cells: list[Cell] = field(default_factory=list)
    diffs: list[NeighbourDiff] = field(default_factory=list)
    bisection: Bisection | None = None
    setup_seconds: float = 0.0  # environments: building or finding them
    trace_seconds: float = 0.0  # every cell's traces, wall time
    envs_built: int = 0
    envs_reused: int = 0
    # Where the cells ran when not on this machine ("the Ray cluster at ...").
    executor: str = ""
    # What the executor's own libraries printed (Ray's driver); in the log file, not the JSON.
    log: str = ""
    # Where the HTML page's cells link to, relative to the page ("" = no links).
    reports_dir: str = ""
    schema_version: int = MATRIX_SCHEMA_VERSION
    kind: str = KIND

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """Each row's key (Cell.row) in table order."""
        return list(dict.fromkeys(c.row for c in self.cells))

    def log_text(self) -> str:
        """What the traced code wrote in every cell's workers, under a line naming the cell."""
        cells = "".join(f"=== {c.versions}, {c.device}, {c.layer}\n{c.log}" for c in self.cells if c.log)
        return cells + (f"=== the executor\n{self.log}" if self.log.strip() else "")

    def cell(self, release: str, flashinfer: str, layer: str, device: str, torch: str = "") -> Cell | None:
        """The cell of the matrix's framework at ``release`` ("": without one)."""
        return self.at((self.framework if release else "", release, flashinfer, layer, torch), device)

    def at(self, row: tuple[str, str, str, str, str], device: str) -> Cell | None:
        """The cell of a row (Cell.row) on a device."""
        return next((c for c in self.cells if c.row == row and c.device == device), None)

    def to_dict(self) -> dict[str, Any]:
        b = self.bisection
        return {
            "schema_version": self.schema_version, "kind": self.kind, "layer": self.layer, "impl": self.impl,
            "mode": self.mode, "torch": self.torch, "framework": self.framework, "releases": self.releases,
            "model": self.model, "flashinfer": self.flashinfer,
            "devices": self.devices, "launch": self.launch, "setup_seconds": round(self.setup_seconds, 3),
            "trace_seconds": round(self.trace_seconds, 1), "envs_built": self.envs_built, "envs_reused": self.envs_reused,
            "executor": self.executor,
            "cells": [c.to_dict() for c in self.cells],
            "diffs": [d.__dict__ for d in self.diffs],
            "bisection": None if b is None else {**b.__dict__, "probes": [list(p) for p in b.probes]},
        }

    def to_json(self) -> str:
        return dumps(self.to_dict())

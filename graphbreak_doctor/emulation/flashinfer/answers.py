"""Kernels that answer: host-side queries whose result FlashInfer's Python uses.

Most exports are destination-passing kernels: a no-op is faithful. A few are
host-side queries or constructors whose result FlashInfer's Python uses
(a runner object, a tactic count, a workspace size, an attention plan); a
no-op would answer None and FlashInfer would fail where a GPU machine does
not. Those answer with a plain value of the C++ return type, chosen so that
FlashInfer takes its ordinary path (one tactic, no extra workspace).
"""

from __future__ import annotations

import dataclasses
import re
import threading
from typing import Any, Callable, Optional

from graphbreak_doctor.emulation.flashinfer import kernels, launcher_outputs

# flashinfer/data/csrc/fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu:
# `init(...)` returns a `FusedMoeRunner` module (kind "fused_moe_runner") whose
# GetFunction offers these names.
_CUTLASS_MOE_RUNNER = {
    "get_tactic_num": lambda *a: 1,
    "get_gemm1_tactic_count": lambda *a: 1,
    "get_gemm2_tactic_count": lambda *a: 1,
    "get_tactic_occupancy": lambda *a: 1,
    "get_tactic_supports_activation_fusion": lambda *a: False,
    "get_valid_tactics_for_shape": lambda *a: [0],
    "get_workspace_size": lambda *a: 0,
    "run_gemm_profile": None,
    "run_moe": None,
    "run_moe_min_latency": None,
}


@dataclasses.dataclass
class AnswerState:
    """Answers made ready once per process, before any trace."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    prepared: dict[str, Any] = dataclasses.field(default_factory=dict)  # runner modules built by prepare_answers


STATE = AnswerState()


def _cutlass_moe_init(*args: Any) -> Any:
    # Built by prepare_answers() before any trace: nothing here may run
    # tvm_ffi's (traceable) Python while Dynamo is active.
    return STATE.prepared["fused_moe_runner"]


# The batch attention modules' `plan` (prefill, decode, MLA) is a host-side
# scheduler returning the plan as an `Array<int64_t>`; FlashInfer's Python
# keeps it and hands it back to `run` (asserting it is not None) without
# reading it. Only the dry kernels would read it. Sixteen zeros: the length
# of the prefill plan. Where the C++ plan returns the plan together with the
# bytes it staged in the host workspace (`Tuple<Array<int64_t>, int64_t>`,
# FlashInfer's MLA plan since 0.7), the answer is that pair, nothing staged.
_PLAN_INFO_LENGTH = 16
_STAGED_PLAN = "Tuple<Array<int64_t>, int64_t>"


def _attention_plan(*args: Any) -> Any:
    return [0] * _PLAN_INFO_LENGTH


def _staged_attention_plan(*args: Any) -> Any:
    return ([0] * _PLAN_INFO_LENGTH, 0)


# (JitSpec name pattern, export, the module's sources must say) -> answer;
# the first that fits is taken; an answer of None is a no-op.
ANSWERS: list[tuple[re.Pattern, str, str, Callable[..., Any]]] = [
    (re.compile(r"^fused_moe_(\d+|sm\d+)"), "init", "", _cutlass_moe_init),
    (re.compile(r"^batch_"), "plan", _STAGED_PLAN, _staged_attention_plan),
    (re.compile(r"^batch_"), "plan", "", _attention_plan),
]


def answers_for(name: str, exports: tuple[str, ...], source_text: str = "") -> dict[str, Callable[..., Any]]:
    """The answers for library `name`'s `exports`: ANSWERS' first fit for
    each, and the tensors a MoE launcher returns (launcher_outputs.py)."""
    out: dict[str, Callable[..., Any]] = launcher_outputs.answers_for(exports, source_text)
    for pattern, export, says, answer in ANSWERS:
        if export in exports and export not in out and pattern.search(name) and says in source_text:
            out[export] = answer
    return out


def prepare_answers() -> None:
    """Convert every answer and build the runner modules, once per process,
    when the emulation is entered: answers run inside FlashInfer calls that a
    compiled function may be executing (outside the loader, which runs with
    Dynamo off), and must then only use what exists already."""
    with STATE.lock:
        for *_match, answer in ANSWERS:
            kernels.as_function(answer)
        for answer in _CUTLASS_MOE_RUNNER.values():
            if answer is not None:
                kernels.as_function(answer)
    if "fused_moe_runner" not in STATE.prepared:
        STATE.prepared["fused_moe_runner"] = dry_module(
            "fused_moe_runner", tuple(_CUTLASS_MOE_RUNNER), _CUTLASS_MOE_RUNNER
        )


def dry_module(
    name: str,
    exports: tuple[str, ...],
    answers: Optional[dict[str, Optional[Callable[..., Any]]]] = None,
    source_text: str = "",
):
    """A tvm_ffi Module named after `name` whose `exports` are no-op kernels,
    except those in `answers` (by default those ANSWERS gives for `name` and
    its sources' text); see kernels.module."""
    answers = answers if answers is not None else answers_for(name, exports, source_text)
    return kernels.module(name, exports, answers)

"""One frame of a stack, as the findings keep it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    """One frame of a user stack, as Dynamo (or the CUDA-graph recorder) reports it."""

    file: str
    line: int
    function: str
    qualname: str = ""
    code: str = ""

    def location(self) -> str:
        return f"{self.file}:{self.line}"

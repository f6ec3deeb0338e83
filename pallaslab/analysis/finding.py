"""The `Finding` record every analysis returns: a leaf module, so the rule modules that make
findings (`findings`, `gpu_stores`, `vmem_findings`, ...) can share it without importing one
another."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]


@dataclasses.dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    operand: str | None = None  # origin of the operand concerned
    programs: tuple[tuple[int, ...], ...] = ()  # example program ids (at most 8)
    blocks: tuple[tuple[int, ...], ...] = ()  # example block indices of `operand` (at most 8)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code, "severity": self.severity, "message": self.message,
            "operand": self.operand, "programs": [list(p) for p in self.programs],
            "blocks": [list(b) for b in self.blocks],
        }

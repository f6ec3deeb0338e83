"""One named reason why an output is wrong (see `pallaslab.execute.causes`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypedDict

CauseKind = Literal["index-map", "line", "first-visit"]


class CauseJson(TypedDict):
    """A cause in `pallaslab compare --json` (docs/architecture.md, "Stable contracts")."""

    kind: str
    operand: str | None
    line: str | None
    programs: list[list[int]]
    message: str
    through: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Cause:
    """Why (some of) an output's elements are wrong: the operand and its index map, the line
    that wrote the wrong values, or a read before the first write."""

    kind: CauseKind
    operand: str | None  # the operand blamed ("args[1] (y_ref)"), None for a line
    line: str | None  # "file.py:N" (or "Cell In[N]:L"): the index map, store or read
    programs: tuple[tuple[int, ...], ...]  # the programs involved (at most a few)
    message: str
    # A line cause: the body lines its wrong values flow through, ranked (`BodyLine`s)
    through: tuple[Any, ...] = ()

    def to_json(self) -> CauseJson:
        return {"kind": self.kind, "operand": self.operand, "line": self.line,
                "programs": [list(p) for p in self.programs], "message": self.message,
                "through": [b.to_json() for b in self.through]}

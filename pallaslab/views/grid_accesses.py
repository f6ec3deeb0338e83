"""The Grid view's overlay of what each program touches inside its blocks (issue 27 item 4).

`accesses_payload` sends, per operand, one byte per element of its block as the body sees it
(READ 1, READ_MASKED 2, WRITE 4, WRITE_MASKED 8: a masked bit alone is a lane the mask turned
off) for each distinct access pattern of the recorded programs, as a uint8 binary buffer, and
which pattern each program has (most share one: a matmul's 24 programs have one to three per
operand); and each program's accesses in words (`analysis.block_accesses.describe_program`),
which the text and static HTML say too (`accesses_section`, a part of the Grid's tree).
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from pallaslab.analysis.block_accesses import block_accesses, describe
from pallaslab.analysis.block_accesses import describe_program as _say
from pallaslab.analysis.tiling import Tiling
from pallaslab.model import Kernel
from pallaslab.views.parts import Line, Section

TEXT_PROGRAMS = 4  # programs described in the text and static HTML


class GridAccessOperand(TypedDict):
    origin: str
    shape: list[int]  # the block as the body sees it (squeezed dims absent)
    dims: list[int]  # the array dimension of each of its dimensions
    flags: int  # index into `tables`: uint8 (distinct rows, *shape), row-major
    rows: list[int]  # per recorded program: its row of flags (programs often share one)
    lines: list[str]  # "file.py:LINE" of its loads and stores


class GridAccesses(TypedDict):
    steps: list[int]  # the recorded programs (row-major steps), in order
    operands: list[GridAccessOperand]
    text: list[str]  # per recorded program: what it reads and writes, in words
    note: str | None  # what is not recorded (capped, or why nothing is)
    tables: list[memoryview]


def accesses_payload(kernel: Kernel, tiling: Tiling | None) -> GridAccesses:
    """The recorded accesses of the kernel's first programs (pure but for the recording,
    which is cached per kernel)."""
    acc = block_accesses(kernel, tiling)
    tables: list[memoryview] = []
    operands = []
    for op in acc.operands:
        flat = np.ascontiguousarray(op.flags, np.uint8).reshape(len(acc.steps), -1)
        distinct, rows = np.unique(flat, axis=0, return_inverse=True)
        tables.append(memoryview(np.ascontiguousarray(distinct).reshape(-1)))
        operands.append(GridAccessOperand(origin=op.origin, shape=list(op.shape),
                                          dims=list(op.dims), flags=len(tables) - 1,
                                          rows=[int(r) for r in rows.reshape(-1)],
                                          lines=list(op.lines)))
    return GridAccesses(steps=list(acc.steps), operands=operands,
                        text=[_say(acc, k, tiling) for k in range(len(acc.steps))],
                        note=acc.note(), tables=tables)


def accesses_section(kernel: Kernel, tiling: Tiling | None) -> Section | None:
    """The first programs' accesses inside their blocks, one line each (None: none recorded)."""
    lines = describe(block_accesses(kernel, tiling), tiling, TEXT_PROGRAMS)
    if not lines:
        return None
    return Section(("Inside the blocks",), tuple(Line((line,)) for line in lines),
                   css="pl-accesses")

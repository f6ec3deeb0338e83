"""What each program touches inside its blocks: the slices, `pl.ds` windows, strided and
masked loads and stores its body makes, element by element, per operand.

The recording itself (`model._jax.block_accesses`) evaluates the body once per program; here
the first `MAX_PROGRAMS` programs (fewer when their blocks are large: `BYTE_BUDGET`) are
recorded, and each program's accesses are said in words, in the operand's own coordinates:
"program (1, 0) reads x_ref[8:16, 0:128] (all of its block)".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from pallaslab.analysis.tiling import Tiling
from pallaslab.model import Kernel
from pallaslab.model._jax import block_accesses as recording
from pallaslab.model.source_names import short_source
from pallaslab.util.names import body_name

MAX_PROGRAMS = 64  # programs recorded (the first, in execution order)
BYTE_BUDGET = 4 << 20  # bytes of flags kept per kernel (one per element, operand, program)
READ, READ_MASKED = recording.READ, recording.READ_MASKED
WRITE, WRITE_MASKED = recording.WRITE, recording.WRITE_MASKED


@dataclasses.dataclass(frozen=True)
class OperandAccesses:
    """One operand's ref as the body sees it (its block; squeezed dims absent) and, per
    recorded program, the flags of its elements (READ | READ_MASKED | WRITE | WRITE_MASKED)."""

    origin: str
    name: str  # "x_ref" (the body's parameter name), else the origin
    shape: tuple[int, ...]  # the ref's shape
    dims: tuple[int, ...]  # the array dimension of each ref dimension
    flags: np.ndarray  # uint8 (programs, *shape)
    lines: tuple[str, ...]  # "file.py:LINE" of its loads and stores
    followed: bool  # False: reached through a bitcast / reshape, marked whole


@dataclasses.dataclass(frozen=True)
class BlockAccesses:
    """The recorded programs' accesses, or why there are none (`reason`)."""

    steps: tuple[int, ...]  # recorded programs, as row-major steps
    programs: tuple[tuple[int, ...], ...]
    operands: tuple[OperandAccesses, ...]
    total: int  # programs in the grid
    reason: str | None = None  # why nothing was recorded

    @property
    def capped(self) -> bool:
        return 0 < len(self.steps) < self.total

    def note(self) -> str | None:
        """One line on what is not recorded."""
        if self.reason:
            return f"accesses inside blocks not recorded: {self.reason}"
        if self.capped:
            return (f"accesses inside blocks recorded for the first {len(self.steps):,} of "
                    f"{self.total:,} programs")
        return None


_CACHE: dict[int, tuple[Any, BlockAccesses]] = {}


def block_accesses(kernel: Kernel, tiling: Tiling | None) -> BlockAccesses:
    """The loads and stores of the kernel's first programs inside their blocks (cached per
    kernel: the Grid view's payload, text and HTML share one recording)."""
    eqn = getattr(kernel.handle, "eqn", None)
    kept = _CACHE.get(id(eqn))
    if kept is not None and kept[0] is eqn:
        return kept[1]
    found = _record(kernel, tiling, eqn)
    while len(_CACHE) >= 8:
        del _CACHE[next(iter(_CACHE))]
    _CACHE[id(eqn)] = (eqn, found)
    return found


def _record(kernel: Kernel, tiling: Tiling | None, eqn: Any) -> BlockAccesses:
    total = tiling.programs if tiling is not None else 0
    if kernel.kind != "pallas_call" or eqn is None or "grid_mapping" not in eqn.params:
        return BlockAccesses((), (), (), total, "only pallas_call bodies are recorded")
    if tiling is None or not total:
        return BlockAccesses((), (), (), total, "the grid is not known")
    if any(v is None for v in kernel.prefetch_values):
        return BlockAccesses((), (), (), total, "scalar-prefetch values are not known")
    per_program = sum(_ref_size(op) for op in kernel.operands)
    n = min(MAX_PROGRAMS, total, BYTE_BUDGET // max(per_program, 1))
    if n < 1:
        return BlockAccesses((), (), (), total,
                             f"its blocks are too large ({per_program:,} elements a program)")
    try:
        rec = recording.record_block_accesses(eqn, list(kernel.prefetch_values), range(n),
                                              tiling.grid)
    except recording.NotRecordable as err:
        return BlockAccesses((), (), (), total, str(err))
    except Exception as err:  # JAX's own words, kept short: the Grid still draws blocks
        line = (str(err).strip().splitlines() or [""])[0][:160]
        if "unbound axis name" in line:
            return BlockAccesses((), (), (), total, "the body reads its position on a device "
                                 "mesh (axis_index), which has no value outside shard_map")
        return BlockAccesses((), (), (), total, f"{type(err).__name__}: {line}")
    operands = tuple(
        OperandAccesses(op.origin, body_name(op.param or op.origin), tuple(f.shape[1:]),
                        _ref_dims(op), f, tuple(short_source(s) or s for s in rec.lines[i]),
                        i not in rec.not_followed)
        for i, (op, f) in enumerate(zip(kernel.operands, rec.flags, strict=False)))
    return BlockAccesses(rec.steps, tuple(tiling.program_at(s) for s in rec.steps),
                         operands, total)


def _ref_size(op: Any) -> int:
    extent = op.block_extent if op.block_dims is not None else op.shape
    return math.prod(extent)


def _ref_dims(op: Any) -> tuple[int, ...]:
    if op.block_dims is None:
        return tuple(range(len(op.shape)))
    return tuple(d for d, b in enumerate(op.block_dims) if not b.squeezed)


# --- in words --------------------------------------------------------------------------------


def describe_program(acc: BlockAccesses, k: int, tiling: Tiling | None) -> str:
    """What recorded program `k` touches, one clause per operand and kind:
    "program (1, 0) reads x_ref[8:16, 0:128] (all of its block); writes o_ref[8:16, 0:64]"."""
    clauses = []
    for op in acc.operands:
        start = _block_start(tiling, op.origin, acc.steps[k])
        for verb, on, off in (("reads", READ, READ_MASKED), ("writes", WRITE, WRITE_MASKED)):
            text = _clause(op, op.flags[k], on, off, start)
            if text:
                clauses.append(f"{verb} {text}")
    what = "; ".join(clauses) if clauses else "touches none of its operands' elements"
    return f"program {acc.programs[k]} {what}"


def describe_reads(acc: BlockAccesses, program: tuple[int, ...], tiling: Tiling | None,
                   roles: tuple[str, ...] = ("input",)) -> str | None:
    """What `program` read of the operands with `roles` inside its blocks, "x_ref[0:8, 0:128];
    y_ref[...]" (None when that program was not recorded)."""
    if program not in acc.programs:
        return None
    k = acc.programs.index(program)
    wanted = {op.origin for op in acc.operands} if tiling is None else {
        origin for origin, ot in tiling.operands.items() if ot.role in roles}
    said = [_clause(op, op.flags[k], READ, READ_MASKED,
                    _block_start(tiling, op.origin, acc.steps[k]))
            for op in acc.operands if op.origin in wanted]
    return "; ".join(s for s in said if s) or "nothing"


def _block_start(tiling: Tiling | None, origin: str, step: int) -> np.ndarray | None:
    ot = tiling.operands.get(origin) if tiling is not None else None
    return None if ot is None or not ot.windowed else np.asarray(ot.starts[step], np.int64)


def _clause(op: OperandAccesses, flags: np.ndarray, on: int, off: int,
            start: np.ndarray | None) -> str | None:
    touched = (flags & on) > 0
    masked = ((flags & off) > 0) & ~touched
    if not touched.any():
        return None
    where = np.nonzero(touched)
    lo = [int(w.min()) for w in where]
    hi = [int(w.max()) + 1 for w in where]
    box = math.prod(b - a for a, b in zip(lo, hi, strict=True))
    n = int(touched.sum())
    text = f"{op.name}[{_ranges(op, lo, hi, start)}]"
    if n == touched.size:
        text += " (all of its block)"
    elif n < box:
        text += f" ({n:,} of the {box:,} elements there{_stride_text(where)})"
    if masked.any():
        text += f" where mask ({int(masked.sum()):,} masked off)"
    if not op.followed:
        text += " (through a bitcast or reshape: the whole ref marked)"
    return text


def _ranges(op: OperandAccesses, lo: list[int], hi: list[int], start: np.ndarray | None
            ) -> str:
    """The box in the array's coordinates (a squeezed dim: its one index)."""
    if start is None:
        return ", ".join(f"{a}:{b}" for a, b in zip(lo, hi, strict=True))
    parts = []
    local = dict(zip(op.dims, zip(lo, hi, strict=True), strict=True))
    for d, s in enumerate(start.tolist()):
        if d in local:
            a, b = local[d]
            parts.append(f"{s + a}:{s + b}")
        else:
            parts.append(str(s))
    return ", ".join(parts)


def _stride_text(where: tuple[np.ndarray, ...]) -> str:
    """", every 2nd along dim 1" when the touched indices of a dim step evenly by more than 1."""
    out = []
    for d, idx in enumerate(where):
        values = np.unique(idx)
        steps = np.unique(np.diff(values))
        if len(steps) == 1 and steps[0] > 1:
            out.append(f"every {_ordinal(int(steps[0]))} along dim {d}")
    return (", " + ", ".join(out)) if out else ""


def _ordinal(n: int) -> str:
    return f"{n}{'tsnrhtdd'[(n // 10 % 10 != 1) * (n % 10 < 4) * n % 10::4]}"


def describe(acc: BlockAccesses, tiling: Tiling | None, limit: int = 4) -> list[str]:
    """The first `limit` recorded programs in words, then what was not recorded."""
    lines = [describe_program(acc, k, tiling) for k in range(min(limit, len(acc.steps)))]
    if len(acc.steps) > limit:
        lines.append(f"... {len(acc.steps) - limit:,} more recorded programs")
    note = acc.note()
    return [*lines, note] if note else lines

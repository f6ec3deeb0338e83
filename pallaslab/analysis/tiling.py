"""Whole-grid tiling: every operand's block index for every program, in one vectorized pass.

The index maps of a kernel are evaluated together by one jitted, vmapped function over all
program ids (a million programs take one call), giving a block-index table per operand in
execution order (lexicographic over the grid: the last grid dimension varies fastest). Fetch
counts follow the TPU pipeline: a copy happens at a step whose block index differs from the
previous step's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from pallaslab.model import Kernel, Operand

# Block kinds whose start offset the tiling table can express.
_TABULAR_KINDS = frozenset({"blocked", "squeezed", "element"})


@dataclasses.dataclass(frozen=True)
class OperandTiling:
    """One operand's blocks over the whole grid (rows are steps in execution order)."""

    origin: str
    role: str
    shape: tuple[int, ...]
    extent: tuple[int, ...]  # elements per block along each array dimension
    block_indices: np.ndarray  # (P, ndim) int32: what the index map returned
    fetch_mask: np.ndarray  # (P,) bool: a copy (fetch or write-back) starts at this step
    windowed: bool  # pipelined through VMEM (False for ANY/HBM operands: no copies)
    itemsize: int
    scale: tuple[int, ...]  # elements per block-index unit (block size; 1 for element dims)
    offset: tuple[int, ...]  # low padding of element dims

    @property
    def starts(self) -> np.ndarray:
        """(P, ndim) int64: the first element of each step's block in the array."""
        return self.starts_at(slice(None))

    def starts_at(self, steps: np.ndarray | slice) -> np.ndarray:
        rows = self.block_indices[steps].astype(np.int64)
        return rows * np.asarray(self.scale, np.int64) - np.asarray(self.offset, np.int64)

    @property
    def fetches(self) -> int | None:
        return int(self.fetch_mask.sum()) if self.windowed else None

    @property
    def hbm_bytes(self) -> int | None:
        """Bytes copied between HBM and VMEM over the grid (edge blocks clipped to the array)."""
        if not self.windowed:
            return None
        return int(self.clipped_volume(self.starts_at(self.fetch_mask)).sum()) * self.itemsize

    def clipped_volume(self, starts: np.ndarray) -> np.ndarray:
        """In-bounds elements of blocks starting at `starts` (rows)."""
        shape = np.asarray(self.shape, np.int64)
        lo = np.clip(starts, 0, shape)
        hi = np.clip(starts + np.asarray(self.extent, np.int64), 0, shape)
        return np.prod(hi - lo, axis=1, dtype=np.int64)

    def block_key(self) -> tuple[np.ndarray, tuple[int, ...]]:
        """Each step's block index as one int64 (ravelled over the observed index range)."""
        lo = self.block_indices.min(axis=0, initial=0)
        hi = self.block_indices.max(axis=0, initial=0)
        span = tuple(int(s) for s in (hi - lo + 1))
        if not span:
            return np.zeros(len(self.block_indices), np.int64), ()
        shifted = (self.block_indices - lo).T.astype(np.int64)
        return np.ravel_multi_index(tuple(shifted), span), span

    def steps_with_block(self, block_index: tuple[int, ...]) -> np.ndarray:
        """Steps (execution order) whose block for this operand is `block_index`."""
        target = np.asarray(block_index, self.block_indices.dtype)
        return np.flatnonzero(np.all(self.block_indices == target, axis=1))


@dataclasses.dataclass(frozen=True)
class Tiling:
    """The block-index tables of every BlockSpec operand of one kernel."""

    grid: tuple[int, ...]
    operands: Mapping[str, OperandTiling]

    @property
    def programs(self) -> int:
        return math.prod(self.grid)

    def program_ids(self) -> np.ndarray:
        """(P, grid rank) int32 program ids in execution order."""
        return _program_ids(self.grid).T

    def program_at(self, step: int) -> tuple[int, ...]:
        if not 0 <= step < self.programs:
            raise IndexError(f"step {step} is outside the grid {self.grid} "
                             f"({self.programs} programs)")
        return tuple(int(i) for i in np.unravel_index(step, self.grid))

    def step_of(self, program: tuple[int, ...]) -> int:
        if len(program) != len(self.grid) or any(
            not 0 <= p < g for p, g in zip(program, self.grid, strict=True)
        ):
            raise IndexError(f"program {tuple(program)} is outside the grid {self.grid}")
        return int(np.ravel_multi_index(tuple(program), self.grid)) if self.grid else 0

    def programs_at(self, steps: np.ndarray, limit: int | None = None) -> list[tuple[int, ...]]:
        steps = np.asarray(steps)[:limit]
        if not self.grid:
            return [() for _ in steps]
        ids = np.unravel_index(steps, self.grid)
        return [tuple(int(c[i]) for c in ids) for i in range(len(steps))]


def tiling_unavailable_reason(kernel: Kernel) -> str | None:
    """Why `tile(kernel)` cannot build tables, or None when it can."""
    if kernel.kind != "pallas_call":
        return "mesh kernels (pl.kernel / plgpu.kernel) have no BlockSpecs to tile"
    if not kernel.grid_known:
        dims = ", ".join(str(d) for d in kernel.dynamic_grid_dims)
        return (f"grid dimension(s) {dims} are dynamic and the arguments were abstract: pass "
                "concrete arrays to evaluate the grid")
    if kernel.scalar_prefetch and not kernel.prefetch_values:
        return ("index maps read scalar-prefetch operands whose values are unknown: pass "
                "concrete arrays to evaluate them")
    if not kernel.blocked_operands:
        return "the kernel has no BlockSpec operands"
    return None


def tile(kernel: Kernel) -> Tiling | None:
    """Block-index tables for every BlockSpec operand, or None (see `tiling_unavailable_reason`)."""
    if tiling_unavailable_reason(kernel) is not None:
        return None
    grid = tuple(int(g) for g in kernel.grid)  # type: ignore[arg-type]
    evaluator = kernel.handle.index_map_evaluator
    tables = evaluator(_program_ids(grid), kernel.prefetch_values)
    operands = {}
    for op, table in zip(kernel.blocked_operands, tables, strict=True):
        if all(d.kind in _TABULAR_KINDS for d in op.block_dims or ()):
            operands[op.origin] = _operand_tiling(op, table.reshape(-1, len(op.shape)))
    return Tiling(grid=grid, operands=operands)


def _program_ids(grid: tuple[int, ...]) -> np.ndarray:
    """(rank, P) int32 program ids in execution order."""
    if not grid:
        return np.zeros((0, 1), np.int32)
    return np.indices(grid, dtype=np.int32).reshape(len(grid), -1)


def _operand_tiling(op: Operand, block_indices: np.ndarray) -> OperandTiling:
    dims = op.block_dims or ()
    fetch_mask = np.ones(len(block_indices), bool)
    if len(block_indices) > 1:
        fetch_mask[1:] = np.any(block_indices[1:] != block_indices[:-1], axis=1)
    return OperandTiling(
        origin=op.origin, role=op.role, shape=op.shape, extent=op.block_extent or (),
        block_indices=block_indices, fetch_mask=fetch_mask,
        windowed=op.windowed, itemsize=op.itemsize,
        scale=tuple(d.size if d.kind == "blocked" else 1 for d in dims),
        offset=tuple(d.padding[0] if d.kind == "element" else 0 for d in dims),
    )

"""Whole-grid tiling: every operand's block index for every program, vectorized.

The index maps of a kernel are evaluated together by one jitted, vmapped function over the
program ids, giving a block-index table per operand in execution order (lexicographic over the
grid: the last grid dimension varies fastest). Fetch counts follow the TPU pipeline: a copy
happens at a step whose block index differs from the previous step's.

Bounded memory: the programs are evaluated in chunks of `CHUNK_PROGRAMS` (2^20) whose ids are
made per chunk, and each chunk's block indices are written into preallocated int32 tables;
the scans over the tables (fetch bytes here, the rules in `findings`) go `SCAN_CHUNK` steps at a
time. So the working set beyond the tables is a few chunks whatever the grid. The tables take
`4 x ndim + 1` bytes per program and operand (about 48 bytes per program in all for three 2-D
operands, measured by `benchmarks/bench_tiling.py`), so the whole-grid analysis is refused
above `MAX_PROGRAMS` programs: 2^24 = 16,777,216 by default, set by the environment variable
`PALLASLAB_MAX_PROGRAMS` (read at each call). `tile()` then returns None, before anything of
the grid's size is allocated, and `tiling_unavailable_reason()` names the grid, its program
count, the limit and how to raise it. A grid with a zero dimension has no programs: its
tiling is empty (every table has zero rows). Negative grids never get here: `capture` rejects
them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from pallaslab import settings
from pallaslab.model import Kernel, Operand

# Block kinds whose start offset the tiling table can express (a BoundedSlice's start is an
# element offset and its size varies per step: `OperandTiling.sizes`).
_TABULAR_KINDS = frozenset({"blocked", "squeezed", "element", "bounded"})

MAX_PROGRAMS = 2**24  # default limit on the programs of a whole-grid analysis
MAX_PROGRAMS_ENV = settings.MAX_PROGRAMS
CHUNK_PROGRAMS = 2**20  # programs per call of the index-map evaluator
SCAN_CHUNK = 2**18  # steps per pass of the numpy scans over the tables (small temporaries)


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
    # (P, ndim) int32 elements of each step's block when a dim is a pl.BoundedSlice (its size
    # varies per step, up to `extent`); None: every block spans `extent`.
    sizes: np.ndarray | None = None

    @property
    def starts(self) -> np.ndarray:
        """(P, ndim) int64: the first element of each step's block in the array."""
        return self.starts_at(slice(None))

    def starts_at(self, steps: np.ndarray | slice) -> np.ndarray:
        rows = self.block_indices[steps].astype(np.int64)
        return rows * np.asarray(self.scale, np.int64) - np.asarray(self.offset, np.int64)

    def extents_at(self, steps: np.ndarray | slice) -> np.ndarray:
        """(n, ndim) int64: elements of each of these steps' blocks along each dimension."""
        if self.sizes is not None:
            return self.sizes[steps].astype(np.int64)
        n = len(self.block_indices[steps])
        return np.broadcast_to(np.asarray(self.extent, np.int64), (n, len(self.extent)))

    def volume_at(self, steps: np.ndarray | slice) -> np.ndarray:
        """In-bounds elements of these steps' blocks."""
        return self.clipped_volume(self.starts_at(steps), self.extents_at(steps))

    @property
    def fetches(self) -> int | None:
        return int(self.fetch_mask.sum()) if self.windowed else None

    @property
    def hbm_bytes(self) -> int | None:
        """Bytes copied between HBM and VMEM over the grid (edge blocks clipped to the array)."""
        if not self.windowed:
            return None
        elements = 0
        for start, stop in step_chunks(len(self.block_indices)):  # O(chunk) temporaries
            steps = start + np.flatnonzero(self.fetch_mask[start:stop])
            elements += int(self.volume_at(steps).sum())
        return elements * self.itemsize

    def clipped_volume(self, starts: np.ndarray, extents: np.ndarray | None = None
                       ) -> np.ndarray:
        """In-bounds elements of blocks starting at `starts` (rows), each `extents` (rows;
        the operand's extent by default) long."""
        shape = np.asarray(self.shape, np.int64)
        lo = np.clip(starts, 0, shape)
        hi = np.clip(starts + (np.asarray(self.extent, np.int64) if extents is None
                               else extents), 0, shape)
        return np.prod(hi - lo, axis=1, dtype=np.int64)

    def block_key(self) -> tuple[np.ndarray, int]:
        """(keys, nkeys): each step's block index as one integer in [0, nkeys), equal for
        equal blocks; int32 when nkeys allows. Ravelled over the observed index range a chunk
        at a time (no (P, ndim) int64 copy); a range much wider than the grid is renumbered
        densely instead, so key-indexed tables stay O(P)."""
        bi = self.block_indices
        if not len(bi) or not bi.shape[1]:
            return np.zeros(len(bi), np.int32), 1
        lo = [int(v) for v in bi.min(axis=0)]
        span = [int(h) - low + 1 for h, low in zip(bi.max(axis=0), lo, strict=True)]
        nkeys = math.prod(span)
        if nkeys > 4 * len(bi) + 1024:  # sparse, perhaps beyond int64: number distinct rows
            _, inverse = np.unique(bi, axis=0, return_inverse=True)
            return inverse.reshape(-1).astype(_key_dtype(len(bi))), int(inverse.max()) + 1
        keys = np.empty(len(bi), _key_dtype(nkeys))
        for start, stop in step_chunks(len(bi)):
            keys[start:stop] = _ravel_rows(bi[start:stop], lo, span)
        return keys, nkeys

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


def max_programs() -> int:
    """The most programs a whole-grid analysis takes on: `PALLASLAB_MAX_PROGRAMS`, else
    `MAX_PROGRAMS`. Raises SettingError, naming the variable, when it is not a whole number
    >= 1 (a bad limit is an error, never a silently skipped analysis)."""
    return settings.max_programs(default=MAX_PROGRAMS)


def table_bytes_per_program(kernel: Kernel) -> int:
    """Bytes the tiling tables hold per program: an int32 block index per operand dimension
    and a fetch flag per operand."""
    return sum(4 * len(op.shape) + 1 for op in kernel.blocked_operands)


def over_limit_reason(kernel: Kernel) -> str | None:
    """The refusal of a grid with more programs than the analysis limit, or None."""
    programs = kernel.programs
    if programs is None:
        return None
    limit = max_programs()
    if programs <= limit:
        return None
    per_program = table_bytes_per_program(kernel)
    return (f"grid {_grid_text(kernel.grid)} has {programs:,} programs, more than the "
            f"whole-grid analysis limit of {limit:,}; raise it with "
            f"{MAX_PROGRAMS_ENV}={programs} (the tables take ~{per_program} bytes per program, "
            f"~{_gib(per_program * programs)} for this grid)")


def tiling_unavailable_reason(kernel: Kernel) -> str | None:
    """Why `tile(kernel)` cannot build tables, or None when it can."""
    if kernel.kind == "mesh":  # nested emit_pipelines ("pipeline") tile like pallas_calls
        return "mesh kernels (pl.kernel / plgpu.kernel) have no BlockSpecs to tile"
    if not kernel.grid_known:
        dims = ", ".join(str(d) for d in kernel.dynamic_grid_dims)
        return (f"grid dimension(s) {dims} are dynamic and "
                + (kernel.dynamic_values_reason or "the arguments were abstract: pass concrete "
                   "arrays to evaluate the grid"))
    if any(g < 0 for g in kernel.grid):  # type: ignore[operator]
        return f"grid {_grid_text(kernel.grid)} has a negative dimension"
    if kernel.scalar_prefetch and not kernel.prefetch_values:
        return ("index maps read scalar-prefetch operands whose values are unknown: "
                + (kernel.dynamic_values_reason or "pass concrete arrays to evaluate them"))
    if not kernel.blocked_operands:
        return "the kernel has no BlockSpec operands"
    if kernel.handle is not None and kernel.handle.index_map_evaluator is None:
        return kernel.dynamic_values_reason or "its index maps cannot be evaluated here"
    return over_limit_reason(kernel)


def tile(kernel: Kernel, *, chunk: int = CHUNK_PROGRAMS) -> Tiling | None:
    """Block-index tables for every BlockSpec operand, or None (see `tiling_unavailable_reason`).

    The index maps are evaluated `chunk` programs at a time (see the module docstring).
    """
    if tiling_unavailable_reason(kernel) is not None:
        return None
    grid = tuple(int(g) for g in kernel.grid)  # type: ignore[arg-type]
    tabular = {i: op for i, op in enumerate(kernel.blocked_operands)
               if all(d.kind in _TABULAR_KINDS for d in op.block_dims or ())}
    tables = block_index_tables(kernel.handle.index_map_evaluator, grid, kernel.prefetch_values,
                                {i: len(op.shape) + len(_bounded_dims(op))
                                 for i, op in tabular.items()}, chunk)
    # A nested pipeline starts over in each program of its enclosing kernel: its first step
    # there fetches every block.
    restart = math.prod(grid[kernel.outer_dims:]) if kernel.outer_dims else 0
    operands = {op.origin: _operand_tiling(op, tables[i], restart)
                for i, op in tabular.items()}
    return Tiling(grid=grid, operands=operands)


def block_index_tables(
    evaluate: Any, grid: tuple[int, ...], prefetch: Sequence[Any], ranks: Mapping[int, int],
    chunk: int = CHUNK_PROGRAMS,
) -> dict[int, np.ndarray]:
    """(P, rank) int32 block-index tables of the block mappings numbered in `ranks`, filled
    `chunk` programs per evaluator call."""
    programs = math.prod(grid)
    if 0 < programs <= chunk:  # one call: keep its outputs rather than copy them
        outs = evaluate(_program_ids(grid), prefetch)
        return {i: np.asarray(outs[i], np.int32).reshape(programs, rank)
                for i, rank in ranks.items()}
    tables = {i: np.empty((programs, rank), np.int32) for i, rank in ranks.items()}
    for start, ids in program_id_chunks(grid, chunk):
        outs = evaluate(ids, prefetch)
        stop = min(start + ids.shape[1], programs)
        for i, table in tables.items():
            table[start:stop] = outs[i].reshape(ids.shape[1], -1)[: stop - start]
    return tables


def program_id_chunks(grid: tuple[int, ...], chunk: int) -> Iterator[tuple[int, np.ndarray]]:
    """(first step, (rank, width) int32 program ids) per chunk, in execution order.

    Every chunk has the same width (the last is padded by repeating the last program) so the
    jitted evaluator compiles once.
    """
    programs = math.prod(grid)
    width = max(1, min(chunk, programs))
    for start in range(0, programs, width):
        steps = np.minimum(np.arange(start, start + width, dtype=np.int64), programs - 1)
        yield start, _program_ids_at(grid, steps)


def _program_ids_at(grid: tuple[int, ...], steps: np.ndarray) -> np.ndarray:
    """(rank, len(steps)) int32 program ids of these steps."""
    if not grid:
        return np.zeros((0, len(steps)), np.int32)
    return np.stack(np.unravel_index(steps, grid)).astype(np.int32)


def _program_ids(grid: tuple[int, ...]) -> np.ndarray:
    """(rank, P) int32 program ids in execution order (the whole grid: bounded by the limit)."""
    if not grid:
        return np.zeros((0, 1), np.int32)
    return np.indices(grid, dtype=np.int32).reshape(len(grid), -1)


def _grid_text(grid: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("?" if g is None else str(g) for g in grid) + \
        ("," if len(grid) == 1 else "") + ")"


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.1f} MiB"


def step_chunks(programs: int, chunk: int | None = None) -> Iterator[tuple[int, int]]:
    """[start, stop) ranges of at most `chunk` (default `SCAN_CHUNK`) steps covering
    `programs` steps."""
    chunk = chunk or SCAN_CHUNK
    for start in range(0, programs, chunk):
        yield start, min(start + chunk, programs)


def _key_dtype(n: int) -> type[np.signedinteger]:
    return np.int32 if n <= 2**31 else np.int64


def _ravel_rows(rows: np.ndarray, lo: Sequence[int], span: Sequence[int]) -> np.ndarray:
    """(n,) int64 ravelled index of (n, ndim) rows over the box [lo, lo + span)."""
    keys = np.zeros(len(rows), np.int64)
    for d, (low, n) in enumerate(zip(lo, span, strict=True)):
        keys *= n
        keys += rows[:, d]
        keys -= low
    return keys


def _fetch_mask(block_indices: np.ndarray) -> np.ndarray:
    """(P,) bool: the block index differs from the previous step's (the first step fetches)."""
    mask = np.zeros(len(block_indices), bool)
    mask[:1] = True
    for d in range(block_indices.shape[1]):  # a column at a time: (P,) temporaries only
        mask[1:] |= block_indices[1:, d] != block_indices[:-1, d]
    return mask


def _bounded_dims(op: Operand) -> list[int]:
    return [d for d, dim in enumerate(op.block_dims or ()) if dim.kind == "bounded"]


def _operand_tiling(op: Operand, table: np.ndarray, restart: int = 0) -> OperandTiling:
    """An operand's tiling from its evaluated table: a block index per dimension, then the
    slice size of each BoundedSlice dimension; `restart`: every so many steps the pipeline
    starts over (fetching again)."""
    dims = op.block_dims or ()
    rank = len(op.shape)
    block_indices = table[:, :rank]
    extent = op.block_extent or ()
    sizes = None
    # (a window sliced in place spans its whole bound: JAX's compute_slice)
    if (bounded := _bounded_dims(op)) and not op.in_place:
        sizes = np.repeat(np.asarray(extent, np.int32)[None, :], len(table), axis=0)
        sizes[:, bounded] = table[:, rank:]
    # A copy starts where the block index or (BoundedSlice) its size changes.
    fetch_mask = _fetch_mask(table)
    if restart:
        fetch_mask[::restart] = True
    return OperandTiling(
        origin=op.origin, role=op.role, shape=op.shape, extent=extent,
        block_indices=block_indices, fetch_mask=fetch_mask,
        windowed=op.windowed, itemsize=op.itemsize,
        scale=tuple(d.size if d.kind == "blocked" else 1 for d in dims),
        offset=tuple(d.padding[0] if d.kind == "element" else 0 for d in dims),
        sizes=sizes,
    )

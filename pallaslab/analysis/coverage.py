"""Which blocks (or elements) of an output the grid's programs cover, counted densely for
block grids up to `DENSE_BLOCK_GRID` blocks and sparsely beyond."""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from pallaslab.analysis.tiling import OperandTiling, step_chunks
from pallaslab.model import Operand

MAX_EXAMPLES = 8  # example programs / blocks carried by a finding


@dataclasses.dataclass(frozen=True)
class Coverage:
    total: int  # elements of the array
    missing: int  # elements no block covers
    first_missing: tuple[int, ...] | None
    missing_blocks: tuple[tuple[int, ...], ...]  # example uncovered block indices
    counts: np.ndarray | None  # programs writing each block (block grid), when block-aligned


def coverage(ot: OperandTiling, op: Operand) -> Coverage:
    """Which elements of an operand some program's block covers."""
    if all(d.kind in ("blocked", "squeezed") for d in op.block_dims or ()):
        return _block_coverage(ot)
    return _element_coverage(ot, op)


DENSE_BLOCK_GRID = 2**24  # block grids up to this many blocks are counted densely


def _block_coverage(ot: OperandTiling) -> Coverage:
    """Block-aligned tilings: count per block of the block grid (never per element), a chunk
    of steps at a time."""
    extent = np.maximum(np.asarray(ot.extent, np.int64), 1)
    shape = np.asarray(ot.shape, np.int64)
    nblocks = tuple(int(n) for n in -(-shape // extent))
    total_blocks = math.prod(nblocks)
    dense = total_blocks <= DENSE_BLOCK_GRID
    counts = np.zeros(total_blocks if dense else 0, np.int64)
    covered = np.zeros(0, np.int64)
    for start, stop in step_chunks(len(ot.block_indices)):
        flat = _flat_blocks(ot.block_indices[start:stop], nblocks)
        if dense:
            per_block = np.bincount(flat)
            counts[: len(per_block)] += per_block
        else:  # a huge array: keep only the blocks written
            covered = np.union1d(covered, flat)
    if not dense:
        return _sparse_block_coverage(covered, nblocks, extent, shape)
    counts = counts.reshape(nblocks)
    # Elements per block along each dim (edge blocks are short), as an outer product.
    sizes = [np.minimum(extent[d], shape[d] - np.arange(n) * extent[d])
             for d, n in enumerate(nblocks)]
    volume = functools.reduce(np.multiply.outer, sizes, np.array(1, np.int64))
    uncovered = counts == 0
    missing = int(volume[uncovered].sum())
    blocks = np.argwhere(uncovered)[:MAX_EXAMPLES]
    first = tuple(int(v) for v in blocks[0] * extent) if len(blocks) else None
    return Coverage(int(np.prod(shape)), missing, first,
                    tuple(tuple(int(v) for v in b) for b in blocks), counts)


def _flat_blocks(block_indices: np.ndarray, nblocks: tuple[int, ...]) -> np.ndarray:
    """Ravelled block index of every row whose block lies inside the block grid, a column
    at a time (no (n, ndim) int64 copy of the table)."""
    flat = np.zeros(len(block_indices), np.int64)
    inside = np.ones(len(block_indices), bool)
    for d, n in enumerate(nblocks):
        col = block_indices[:, d]
        inside &= (col >= 0) & (col < n)
        flat *= n
        flat += col
    return flat[inside]


def _sparse_block_coverage(covered: np.ndarray, nblocks: tuple[int, ...], extent: np.ndarray,
                           shape: np.ndarray) -> Coverage:
    """Coverage from the sorted distinct blocks written, for block grids too large to count."""
    starts = np.stack(np.unravel_index(covered, nblocks), axis=1) * extent
    written = int(np.prod(np.minimum(starts + extent, shape) - starts, axis=1).sum())
    total = int(np.prod(shape))
    # The first few missing blocks lie below len(covered) + MAX_EXAMPLES (pigeonhole).
    candidates = np.arange(min(math.prod(nblocks), len(covered) + MAX_EXAMPLES))
    gaps = candidates[~np.isin(candidates, covered)][:MAX_EXAMPLES]
    blocks = np.stack(np.unravel_index(gaps, nblocks), axis=1) if len(gaps) else \
        np.zeros((0, len(nblocks)), np.int64)
    first = tuple(int(v) for v in blocks[0] * extent) if len(blocks) else None
    return Coverage(total, total - written, first,
                    tuple(tuple(int(v) for v in b) for b in blocks), None)


def _element_coverage(ot: OperandTiling, op: Operand) -> Coverage:
    """Element-offset (pl.Element, pl.BoundedSlice) tilings: mark each distinct window."""
    covered = np.zeros(ot.shape, bool)
    windows = np.concatenate([ot.starts, ot.extents_at(slice(None))], axis=1)
    windows = np.unique(windows, axis=0) if len(windows) else windows
    starts, extents = np.split(windows, 2, axis=1)
    shape = np.asarray(ot.shape, np.int64)
    lo = np.clip(starts, 0, shape)
    hi = np.clip(starts + extents, 0, shape)
    for a, b in zip(lo, hi, strict=True):
        covered[tuple(slice(int(x), int(y)) for x, y in zip(a, b, strict=True))] = True
    points = np.argwhere(~covered)
    extent = np.maximum(np.asarray(op.block_extent or (), np.int64), 1)
    blocks = np.unique(points // extent, axis=0)[:MAX_EXAMPLES] if len(points) else points
    return Coverage(
        covered.size, int(points.shape[0]),
        tuple(int(i) for i in points[0]) if len(points) else None,
        tuple(tuple(int(v) for v in b) for b in blocks), None,
    )

"""Which operands of a batched kernel tile their array regularly, decided from the evaluated
block-index tables: such an operand is read and written with reshapes, transposes and slices
instead of a gather and a scatter (`pallaslab.model._jax.vectorize_blocks`).

Regular means: every block dimension is Blocked (or squeezed), the array divides into whole
blocks, and along each array dimension the block index is either a constant or `pid[g] + c`
for one grid dimension `g` (each grid dimension used at most once: a permutation), staying
within the array. The tables hold the index map's value for every program, so this is exact
for the captured kernel; index maps that read scalar-prefetch operands are never treated as
regular (their values are data, the run may bind others).
"""

from __future__ import annotations

import numpy as np

from pallaslab.analysis.tiling import OperandTiling, Tiling
from pallaslab.model import Kernel
from pallaslab.model._jax.vectorize_blocks import Layout

_REGULAR_KINDS = frozenset({"blocked", "squeezed"})


def regular_layouts(kernel: Kernel, tiling: Tiling) -> tuple[tuple[str, Layout], ...]:
    """(origin, layout) of each operand whose blocks tile its array regularly."""
    if kernel.scalar_prefetch or not tiling.programs:
        return ()
    ids = tiling.program_ids()
    found = []
    for op in kernel.blocked_operands:
        table = tiling.operands.get(op.origin)
        if table is None or not all(d.kind in _REGULAR_KINDS for d in op.block_dims or ()):
            continue
        if (layout := layout_of(table, ids, tiling.grid)) is not None:
            found.append((op.origin, layout))
    return tuple(found)


def layout_of(table: OperandTiling, ids: np.ndarray, grid: tuple[int, ...]) -> Layout | None:
    """Per array dimension (grid dimension or None, offset in blocks), or None if irregular."""
    if table.sizes is not None or any(o for o in table.offset) or \
            any(a % b for a, b in zip(table.shape, table.extent, strict=True)):
        return None
    layout: list[tuple[int | None, int]] = []
    for j, (size, block) in enumerate(zip(table.shape, table.extent, strict=True)):
        dim = _dim_layout(table.block_indices[:, j].astype(np.int64), ids, grid, size // block)
        if dim is None or (dim[0] is not None and dim[0] in {g for g, _ in layout}):
            return None
        layout.append(dim)
    return tuple(layout)


def _dim_layout(col: np.ndarray, ids: np.ndarray, grid: tuple[int, ...], count: int
                ) -> tuple[int | None, int] | None:
    """`col` (block indices along one array dimension) as a constant or `pid[g] + c`."""
    first = int(col[0])
    if np.all(col == first):
        return (None, first) if 0 <= first < count else None
    for g, extent in enumerate(grid):
        if extent < 2:
            continue
        shift = col - ids[:, g]
        c = int(shift[0])
        if np.all(shift == c) and c >= 0 and c + extent <= count:
            return g, c
    return None

"""The pipeline of a grouped matmul (MoE ragged dot) whose grid comes from its group sizes.

A grouped matmul (megablox / tokamax `gmm`) runs one `emit_pipeline` over (n tiles, m tiles,
k tiles) where the m-tile axis is dynamic: the kernel computes, from the group sizes, which
row tile each step visits and which group (expert) it belongs to. A row tile that straddles a
group boundary is visited once per group. The lhs block changes with the row tile, the rhs
block with the group, the output block with the row tile; a block that does not change is not
copied again. Those per-step copies and the per-step matmul go through the same max-plus
pipeline recurrence as any grid (`pipeline.simulate`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from pallaslab.analysis.chips import Chip
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.cost import padded_dot
from pallaslab.analysis.pipeline import STEP_OVERHEAD, kernel_peak, simulate


def group_tiles(group_sizes: np.ndarray, tile_m: int) -> tuple[np.ndarray, np.ndarray]:
    """(row tile, group) of every m step, as the grouped matmul's metadata orders them."""
    ends = np.cumsum(np.asarray(group_sizes, np.int64))
    starts = ends - np.asarray(group_sizes, np.int64)
    tiles, groups = [], []
    for g, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
        if hi > lo:  # an empty group visits no tile
            first, last = lo // tile_m, (hi - 1) // tile_m
            tiles.append(np.arange(first, last + 1))
            groups.append(np.full(last - first + 1, g))
    if not tiles:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(tiles), np.concatenate(groups)


def grouped_pipeline_time(kernel: Any, chip: str | Chip, group_sizes: np.ndarray,
                          step_overhead: float = STEP_OVERHEAD) -> float | None:
    """Predicted seconds of a grouped matmul kernel, or None when its nested pipeline is not
    one of the two layouts this model knows (see `_layout`)."""
    c = chip if isinstance(chip, Chip) else get_chip(chip)
    lay = _layout(kernel)
    if lay is None:
        return None
    m_tiles, groups = group_tiles(group_sizes, lay.tm)
    outer = (math.ceil(lay.n / lay.tn), math.ceil(lay.k / lay.tk))
    tiles = len(m_tiles)
    if tiles == 0:
        return 0.0
    if lay.contracting:  # tgmm: grid (n, k, row tiles); the row tiles are contracted
        n_idx = np.repeat(np.arange(outer[0]), outer[1] * tiles)
        k_idx = np.tile(np.repeat(np.arange(outer[1]), tiles), outer[0])
        t_idx = np.tile(np.arange(tiles), outer[0] * outer[1])
    else:  # gmm: grid (n, row tiles, k)
        n_idx = np.repeat(np.arange(outer[0]), tiles * outer[1])
        t_idx = np.tile(np.repeat(np.arange(tiles), outer[1]), outer[0])
        k_idx = np.tile(np.arange(outer[1]), outer[0] * tiles)
    mt, gr = m_tiles[t_idx], groups[t_idx]
    lhs_new = _changed(mt, k_idx)
    rhs_new = _changed(mt, n_idx) if lay.contracting else _changed(gr, k_idx, n_idx)
    out_key = (gr, k_idx, n_idx) if lay.contracting else (mt, n_idx)
    out_last = np.append(_changed(*out_key)[1:], True)
    copy_in = (lhs_new * lay.lhs_block + rhs_new * lay.rhs_block) / c.hbm_bandwidth
    write_back = out_last * lay.out_block / c.hbm_bandwidth
    rows, depth = (lay.tk, lay.tm) if lay.contracting else (lay.tm, lay.tk)
    flops = 2.0 * padded_dot(rows, depth, lay.tn, c.mxu_size)
    compute = np.full(len(t_idx), flops / kernel_peak(kernel, c) + step_overhead)
    _, summary, _ = simulate(copy_in, compute, write_back)
    return summary.predicted_time


@dataclasses.dataclass(frozen=True)
class _Layout:
    tm: int
    tk: int
    tn: int
    k: int
    n: int
    lhs_block: int  # bytes
    rhs_block: int
    out_block: int
    contracting: bool  # the ragged dimension is contracted (tgmm: one output per group)


def _changed(*keys: np.ndarray) -> np.ndarray:
    """True where a step's block index differs from the previous step's (always at step 0)."""
    out = np.zeros(len(keys[0]), bool)
    out[0] = True
    for k in keys:
        out[1:] |= k[1:] != k[:-1]
    return out


def _layout(kernel: Any) -> _Layout | None:
    """The tiles of a grouped matmul's nested pipeline: gmm (lhs [M, K] in (tm, tk) blocks,
    rhs [G, K, N] or [G, N, K], out [M, N]) or tgmm (lhs [M, K], rhs [M, N] in row blocks,
    out [G, K, N])."""
    inner = kernel.pipelines[0] if kernel.pipelines else None
    if inner is None or len(inner.grid) != 3:
        return None
    ins = [op for op in inner.operands if op.role == "input" and op.block_dims]
    outs = [op for op in inner.operands if op.role == "output" and op.block_dims]
    if len(ins) != 2 or len(outs) != 1:
        return None
    lhs, rhs, out = ins[0], ins[1], outs[0]
    # A block larger than its array moves and computes only the array's extent.
    lb, rb, ob = (tuple(min(d.size, n) for d, n in zip(op.block_dims, op.shape, strict=True)
                        if d.kind != "squeezed") for op in (lhs, rhs, out))
    if len(lb) != 2 or len(rb) != 2 or len(ob) != 2 or len(lhs.shape) != 2:
        return None
    lhs_b, rhs_b, out_b = (math.prod(b) * np.dtype(op.dtype).itemsize
                           for b, op in ((lb, lhs), (rb, rhs), (ob, out)))
    big_k = int(lhs.shape[1])
    if len(out.shape) == 3 and len(rhs.shape) == 2:  # tgmm
        return _Layout(lb[0], lb[1], rb[1], big_k, int(rhs.shape[1]), lhs_b, rhs_b, out_b, True)
    if len(rhs.shape) != 3:
        return None
    if rhs.shape[1] == big_k and rb[0] == lb[1]:  # rhs [G, K, N]
        return _Layout(lb[0], lb[1], rb[1], big_k, int(rhs.shape[2]), lhs_b, rhs_b, out_b, False)
    if rhs.shape[2] == big_k and rb[1] == lb[1]:  # rhs [G, N, K]
        return _Layout(lb[0], lb[1], rb[0], big_k, int(rhs.shape[1]), lhs_b, rhs_b, out_b, False)
    return None

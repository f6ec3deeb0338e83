"""Description + inputs -> the expected output, in NumPy alone: the grid walked in order,
each program's blocks sliced from NaN-padded arrays as its index maps say. Shares no code
with `build` but the description (and `ops`' NumPy halves)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from fuzz.ops import ELEMENTWISE, REDUCTIONS, np_dtype
from fuzz.spec import (
    AtomicKernel,
    BlockKernel,
    DmaKernel,
    Kernel,
    MosaicGpuKernel,
    Operand,
    PipelineKernel,
    RemoteKernel,
    TritonKernel,
)

F32 = np.float32
BF16 = np_dtype("bfloat16")


def expected(kernel: Kernel, args: tuple[np.ndarray, ...]) -> np.ndarray:
    if isinstance(kernel, BlockKernel):
        return _block(kernel, args)
    if isinstance(kernel, DmaKernel):
        return _dma(kernel, args[0])
    if isinstance(kernel, PipelineKernel):
        return _pipeline(kernel, args)
    if isinstance(kernel, AtomicKernel):
        return _atomic(kernel, args)
    if isinstance(kernel, MosaicGpuKernel):
        return _mosaic_gpu(kernel, args)
    if isinstance(kernel, RemoteKernel):
        return _remote(kernel, args[0])
    return _triton(kernel, args)


def _block(k: BlockKernel, args: tuple[np.ndarray, ...]) -> np.ndarray:
    table = args[0] if k.prefetch else None
    arrays = args[1:] if k.prefetch else args
    padded = [_pad(a.astype(F32), o) for a, o in zip(arrays, k.inputs, strict=True)]
    out = _pad(np.full(k.output.shape, np.nan, F32), k.output)
    acc: np.ndarray | None = None
    for ids in itertools.product(*map(range, k.grid)):
        env: dict[str, Any] = dict(zip(k.coords, ids, strict=True))
        env |= {f"n{c}": n for c, n in zip(k.coords, k.grid, strict=True)}
        env |= {"p": table, "min": min}
        blocks = [_read(a, o, env) for a, o in zip(padded, k.inputs, strict=True)]
        if k.body == "elementwise":
            _write(out, k.output, env, _round_trip(k, ELEMENTWISE[k.op][2](*blocks)))
            continue
        if env[k.init_coord] == 0:
            initial = 0.0 if k.body == "dot" else REDUCTIONS[k.op][0]
            acc = np.full([b for b in k.output.block if b is not None], initial, F32)
        assert acc is not None
        if k.body == "dot":
            acc = acc + blocks[0].astype(np.float64) @ blocks[1].astype(np.float64)
        else:
            v = _round_trip(k, blocks[0])
            if k.output.block[-1] == 1:
                v = v.sum(-1, keepdims=True) if k.op == "sum" else v.max(-1, keepdims=True)
            acc = REDUCTIONS[k.op][2](acc, v)
        if ids[-1] == k.grid[-1] - 1:
            _write(out, k.output, env, acc)
    crop = tuple(slice(0, s) for s in k.output.shape)
    return out[crop].astype(np_dtype(k.output.dtype))


def _round_trip(k: BlockKernel, v: np.ndarray) -> np.ndarray:
    return v.astype(BF16).astype(F32) if k.round_trip else v


def _pad(a: np.ndarray, o: Operand) -> np.ndarray:
    """`a` as stored, NaN-padded to whole blocks (the rows a partial edge block reads)."""
    widths = [(0, (-s) % b if b is not None else 0) for s, b in zip(a.shape, o.block, strict=True)]
    return np.pad(a, widths, constant_values=np.nan)


def _window(o: Operand, env: dict[str, Any]) -> tuple[Any, ...]:
    index = eval(o.index_map, {}, env)
    return tuple(int(i) if b is None else slice(int(i) * b, int(i) * b + b)
                 for i, b in zip(index, o.block, strict=True))


def _read(a: np.ndarray, o: Operand, env: dict[str, Any]) -> np.ndarray:
    block = a[_window(o, env)]
    return block.T if o.transposed else block


def _write(out: np.ndarray, o: Operand, env: dict[str, Any], value: np.ndarray) -> None:
    out[_window(o, env)] = value


def _dma(k: DmaKernel, x: np.ndarray) -> np.ndarray:
    out = np.empty(k.shape, F32)
    n = k.grid[0]
    for i in range(n):
        src = int(eval(k.source, {"min": min}, {"i": i, "ni": n}))
        chunk = x[src * k.rows:(src + 1) * k.rows].astype(F32)
        out[i * k.rows:(i + 1) * k.rows] = ELEMENTWISE[k.op][2](chunk)
    return out.astype(np_dtype(k.dtype))


def _pipeline(k: PipelineKernel, args: tuple[np.ndarray, ...]) -> np.ndarray:
    """Each outer program's slice of rows, block by block in (i, j) order: the output block
    `out_map` gets `op` of each input's block `rows[n]` (a later step overwrites)."""
    ni, nj = k.inner_grid
    out = np.full(k.shape, np.nan, F32)
    b = k.block
    for p, i, j in itertools.product(range(k.outer), range(ni), range(nj)):
        base = p * ni * b

        def rows(expr: str, i: int = i, base: int = base) -> slice:
            r = int(eval(expr, {"min": min}, {"i": i, "ni": ni}))
            return slice(base + r * b, base + r * b + b)

        cols = slice(j * 128, j * 128 + 128)
        blocks = [a[rows(m), cols].astype(F32) for a, m in zip(args, k.rows, strict=True)]
        out[rows(k.out_map), cols] = ELEMENTWISE[k.op][2](*blocks)
    return out.astype(np_dtype(k.dtype))


def _triton(k: TritonKernel, args: tuple[np.ndarray, ...]) -> np.ndarray:
    if k.layout == "vector":
        return ELEMENTWISE[k.op][2](*args).astype(F32)
    x = args[0][:, :k.valid] + (args[1][:, :k.valid] if k.two_inputs else 0.0)
    folded = x.sum(1, keepdims=True) if k.op == "sum" else x.max(1, keepdims=True)
    out = np.zeros(k.shape, F32)
    out[:, :k.valid] = x - folded
    return out


# NumPy's ufunc per atomic: `.at` folds element by element, repeated indices each applied.
_UFUNCS = {"add": np.add, "max": np.maximum, "min": np.minimum}


def _atomic(k: AtomicKernel, args: tuple[np.ndarray, ...]) -> np.ndarray:
    """The programs in order, each folding its window into the zeros the output starts at (a
    plain store instead: the last program's fold is what stays)."""
    fold = _UFUNCS[k.op]
    out = args[-1].astype(F32).copy()
    if k.layout == "histogram":
        index, values = args[0], args[1].astype(F32)
        fold.at(out, (index.astype(np.int64) + k.index_shift) % k.bins, values)
        return out
    x = args[0].astype(F32)
    for p in range(k.grid[0]):
        cols = slice(p * k.block, min((p + 1) * k.block, k.n))
        part = fold.reduce(x[..., cols], axis=-1)
        out = part if k.plain_store else fold(out, part)
    return np.asarray(out, F32)


def _mosaic_gpu(k: MosaicGpuKernel, args: tuple[np.ndarray, ...]) -> np.ndarray:
    """Each block's column tiles in order: the output tile (`out_row`, `out_col`) gets `op` of
    each input's tile (its block's rows, column `cols[n]`); a later step overwrites."""
    out = np.full(k.shape, np.nan, F32)
    for b, c in itertools.product(range(k.blocks), range(k.tiles)):
        def tile(row: str, col: str, b: int = b, c: int = c) -> tuple[slice, slice]:
            r = int(eval(row, {"min": min}, {"b": b, "nb": k.blocks}))
            j = int(eval(col, {"min": min}, {"c": c, "nc": k.tiles}))
            return slice(r * k.rows, (r + 1) * k.rows), slice(j * k.tile, (j + 1) * k.tile)

        tiles = [a[tile("b", m)].astype(F32) for a, m in zip(args, k.cols, strict=True)]
        out[tile(k.out_row, k.out_col)] = ELEMENTWISE[k.op][2](*tiles)
    return out.astype(np_dtype(k.dtype))


def _remote(k: RemoteKernel, x: np.ndarray) -> np.ndarray:
    """Device d receives the shard of device d - shift (its sender, around the ring); read
    before the copy is waited for, its buffer holds nothing defined (NaN)."""
    shards = x.astype(F32).reshape(k.devices, k.rows, 128)
    if not k.wait_recv:
        return np.full(k.shape, np.nan, F32)
    return ELEMENTWISE[k.op][2](np.roll(shards, k.shift, axis=0)).reshape(k.shape)

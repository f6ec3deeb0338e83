"""Catalog kernels that reproduce what production kernels (tokamax's) exposed: blocks narrower
than 128 lanes (per-row statistics, per-token scales), grids and scalar-prefetch values
computed by an earlier kernel from the concrete arguments.

Each case registers in the shared `CATALOG` (tag "production" plus the feature's own tag).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from catalog import case, rand
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

__all__ = ["grid_from_earlier_kernel", "narrow_row_stats", "narrow_scales_in",
           "prefetch_from_earlier_kernel"]


def _row_stats_kernel(x_ref, o_ref):
    x = x_ref[...]
    mean = jnp.mean(x, axis=-1, keepdims=True)
    o_ref[...] = jnp.concatenate(
        [mean, jnp.max(x, axis=-1, keepdims=True), jnp.min(x, axis=-1, keepdims=True),
         jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)] * 2, axis=-1)


def _row_stats_reference(x):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    stats = [mean, jnp.max(x, axis=-1, keepdims=True), jnp.min(x, axis=-1, keepdims=True),
             jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)]
    return jnp.concatenate(stats * 2, axis=-1)


@case("tpu", "production", "narrow", reference=_row_stats_reference)
def narrow_row_stats():
    """Per-row statistics into a (64, 8) f32 output block: narrower than the 128 lanes, so
    libtpu keeps its buffers out of scoped VMEM (the estimate counts only the input's)."""

    def fn(x):
        return pl.pallas_call(
            _row_stats_kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], 8), x.dtype),
            grid=(x.shape[0] // 64,),
            in_specs=[pl.BlockSpec((64, x.shape[1]), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((64, 8), lambda i: (i, 0)))(x)

    return fn, (rand((256, 256)),)


def _scale_rows_kernel(x_ref, s_ref, o_ref):
    o_ref[...] = x_ref[...] * s_ref[:, 0:1]


def _scale_rows_reference(x, s):
    return x * s[:, 0:1]


@case("tpu", "production", "narrow", reference=_scale_rows_reference)
def narrow_scales_in():
    """Per-row scales read through a (128, 4) f32 block (quantization scales, per-token
    weights): a narrow input beside a lane-dense one."""

    def fn(x, s):
        return pl.pallas_call(
            _scale_rows_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // 128,),
            in_specs=[pl.BlockSpec((128, 256), lambda i: (i, 0)),
                      pl.BlockSpec((128, 4), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((128, 256), lambda i: (i, 0)))(x, s)

    return fn, (rand((512, 256)), rand((512, 4), seed=1))


def _count_positive_kernel(x_ref, o_ref):
    o_ref[0] = jnp.sum((x_ref[...] > 0).astype(jnp.int32))


def _count_positive(x):
    """An earlier kernel computing an int32 count from the data."""
    return pl.pallas_call(
        _count_positive_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM))(x)


def _copy_rows_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


@case("tpu", "production", "dynamic-grid")
def grid_from_earlier_kernel():
    """The grid of the second kernel is the count the first kernel computes (masked dense MLA
    sizes its grid this way): capture runs the first under the interpreter to know it."""

    def fn(flags, x):
        n = _count_positive(flags)[0]
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(_copy_rows_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(n,), in_specs=[spec], out_specs=spec)(x)

    flags = jnp.zeros((8, 128), jnp.float32).at[0, :8].set(1.0)  # 8 positive: grid (8,)
    return fn, (flags, rand((64, 128)))


def _gather_blocks_kernel(idx_ref, x_ref, o_ref):
    del idx_ref  # the gather happens in the index map
    o_ref[...] = x_ref[...]


def _block_order_kernel(x_ref, o_ref):
    # a block order decided by the data (as a router or a sparsity mask would): rotated by
    # one more when the sum is positive
    shift = (jnp.sum(x_ref[...]) > 0).astype(jnp.int32)
    lanes = jax.lax.broadcasted_iota(jnp.int32, o_ref.shape, 1)
    o_ref[...] = (lanes + 1 + shift) % 4


def block_order(x):
    """The block order `_block_order_kernel` computes (for tests)."""
    shift = int(jnp.sum(x) > 0)
    return (jnp.arange(4) + 1 + shift) % 4


@case("tpu", "production", "scalar-prefetch")
def prefetch_from_earlier_kernel():
    """Scalar-prefetch block indices computed by an earlier kernel (sparse MLA's top-k
    indices, ragged paged attention's page tables): the index maps' values are known."""

    def fn(x):
        return gather_blocks(ordered_blocks(x), x)

    return fn, (rand((64, 128)),)


def ordered_blocks(x):
    """The first kernel: the block order, as 4 int32 indices."""
    return pl.pallas_call(_block_order_kernel,
                          out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32))(x)[0, :4]


def gather_blocks(order, x):
    """The second kernel: x's 16-row blocks in `order`, through scalar prefetch."""
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(4,),
        in_specs=[pl.BlockSpec((16, 128), lambda i, idx: (idx[i], 0))],
        out_specs=pl.BlockSpec((16, 128), lambda i, idx: (i, 0)))
    return pl.pallas_call(_gather_blocks_kernel, out_shape=jax.ShapeDtypeStruct(
        x.shape, x.dtype), grid_spec=grid_spec)(order, x)

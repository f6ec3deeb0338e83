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

__all__ = ["narrow_row_stats", "narrow_scales_in"]


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

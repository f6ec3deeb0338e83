"""A tiled matmul with bm/bn/bk block sizes: the tune tests' kernel and a CLI case."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

M = N = K = 1024


def _kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(x, y, *, bm=128, bn=128, bk=128):
    m, k = x.shape
    n = y.shape[1]
    for name, block, dim in (("bm", bm, m), ("bn", bn, n), ("bk", bk, k)):
        if dim % block:
            raise ValueError(f"{name}={block} does not divide the dimension {dim}")
    return pl.pallas_call(
        _kernel,
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)


def arguments(dtype=jnp.float32):
    return (jax.ShapeDtypeStruct((M, K), dtype), jax.ShapeDtypeStruct((K, N), dtype))


def tiled(bm=128, bn=128, bk=128):
    """The CLI's case: the config as keyword arguments, returning (fn, args)."""
    return functools.partial(matmul, bm=bm, bn=bn, bk=bk), arguments()

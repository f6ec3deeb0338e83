"""Notebook 3's solutions, and the mistakes learners typically make."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _row_reduce_kernel(x_ref, o_ref, *, op, init):
    @pl.when(pl.program_id(1) == 0)
    def _():
        if init is not None:
            o_ref[...] = jnp.full_like(o_ref, init)
    o_ref[...] = op(o_ref[...], x_ref[...])


def _row_reduce(x, op, init):
    return pl.pallas_call(
        functools.partial(_row_reduce_kernel, op=op, init=init), grid=(2, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, k: (i, k))],
        out_specs=pl.BlockSpec((8, 1), lambda i, k: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], 1), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=True)(x)


def _add_rows(acc, x):
    return acc + jnp.sum(x, axis=1, keepdims=True)


def _max_rows(acc, x):
    return jnp.maximum(acc, jnp.max(x, axis=1, keepdims=True))


def row_sum(x):
    return _row_reduce(x, _add_rows, 0.0)


def row_sum_no_init(x):
    """Wrong: the output is never zeroed."""
    return _row_reduce(x, _add_rows, None)


def row_max(x):
    return _row_reduce(x, _max_rows, -jnp.inf)


def row_max_no_init(x):
    """Wrong: the running maximum starts from whatever the output held."""
    return _row_reduce(x, _max_rows, None)


def _col_sum_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)
    o_ref[...] += jnp.sum(x_ref[...], axis=0, keepdims=True)


def _col_sum(x, semantics):
    return pl.pallas_call(
        _col_sum_kernel, grid=(2, 4),
        in_specs=[pl.BlockSpec((8, 128), lambda j, i: (i, j))],
        out_specs=pl.BlockSpec((1, 128), lambda j, i: (0, j)),
        out_shape=jax.ShapeDtypeStruct((1, x.shape[1]), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics),
        interpret=True)(x)


def col_sum(x):
    return _col_sum(x, ("parallel", "arbitrary"))


def col_sum_all_parallel(x):
    """Wrong: the reduction axis is marked 'parallel'."""
    return _col_sum(x, ("parallel", "parallel"))


def _center_kernel(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = x - jnp.mean(x, axis=1, keepdims=True)


def _center(x, cols):
    spec = pl.BlockSpec((8, cols), lambda i, j: (i, j))
    return pl.pallas_call(_center_kernel, grid=(2, x.shape[1] // cols), in_specs=[spec],
                          out_specs=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=True)(x)


def center_rows(x):
    return _center(x, 256)


def center_rows_half_blocks(x):
    """Wrong: each block sees half a row, so its mean is not the row's."""
    return _center(x, 128)


SOLUTIONS = {"row-sum": row_sum, "col-sum": col_sum, "row-max": row_max,
             "center-rows": center_rows}
WRONG = {
    "row-sum": [(row_sum_no_init, "read before its first write")],
    "col-sum": [(col_sum_all_parallel, "'arbitrary'")],
    "row-max": [(row_max_no_init, "read before its first write")],
    "center-rows": [(center_rows_half_blocks, "your x_ref index map reads the wrong blocks")],
}

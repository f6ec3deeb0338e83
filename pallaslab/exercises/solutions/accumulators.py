"""Notebook 2's solutions, and the mistakes learners typically make."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_SEMANTICS = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"))


def _dot_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...])


def matmul_one_block(x, y):
    return pl.pallas_call(_dot_kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]),
                                                                      x.dtype),
                          interpret=True)(x, y)


def _dot_transposed_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...].T)


def matmul_one_block_transposed(x, y):
    """Wrong: multiplies by y transposed."""
    return pl.pallas_call(_dot_transposed_kernel,
                          out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype),
                          interpret=True)(x, y)


def _tiled(x, y, x_map):
    return pl.pallas_call(
        _dot_kernel, grid=(2, 2),
        in_specs=[pl.BlockSpec((8, 256), x_map), pl.BlockSpec((256, 128), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype), interpret=True)(x, y)


def matmul_tiled(x, y):
    return _tiled(x, y, lambda i, j: (i, 0))


def matmul_tiled_x_follows_j(x, y):
    """Wrong: x's row block follows j instead of i."""
    return _tiled(x, y, lambda i, j: (j, 0))


def _acc_kernel(x_ref, y_ref, o_ref, *, init):
    if init:
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
    o_ref[...] += jnp.dot(x_ref[...], y_ref[...])


def _k_split(kernel, x, y, scratch=()):
    return pl.pallas_call(
        kernel, grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j, k: (i, k)),
                  pl.BlockSpec((128, 128), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype),
        scratch_shapes=list(scratch), compiler_params=_SEMANTICS, interpret=True)(x, y)


def matmul_accumulate(x, y):
    return _k_split(functools.partial(_acc_kernel, init=True), x, y)


def matmul_accumulate_no_init(x, y):
    """Wrong: the output block is never zeroed before the first `+=`."""
    return _k_split(functools.partial(_acc_kernel, init=False), x, y)


def _scratch_kernel(x_ref, y_ref, o_ref, acc_ref, *, init):
    k = pl.program_id(2)
    if init:
        @pl.when(k == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...])

    @pl.when(k == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def matmul_scratch(x, y):
    return _k_split(functools.partial(_scratch_kernel, init=True), x, y,
                    [pltpu.VMEM((8, 128), jnp.float32)])


def matmul_scratch_no_init(x, y):
    """Wrong: the scratch accumulator is never zeroed."""
    return _k_split(functools.partial(_scratch_kernel, init=False), x, y,
                    [pltpu.VMEM((8, 128), jnp.float32)])


SOLUTIONS = {"matmul-one-block": matmul_one_block, "matmul-tiled": matmul_tiled,
             "matmul-accumulate": matmul_accumulate, "matmul-scratch": matmul_scratch}
WRONG = {
    "matmul-one-block": [(matmul_one_block_transposed, "the wrong values were written here")],
    "matmul-tiled": [(matmul_tiled_x_follows_j, "your x_ref index map")],
    "matmul-accumulate": [(matmul_accumulate_no_init, "read before its first write")],
    "matmul-scratch": [(matmul_scratch_no_init, "read before its first write")],
}

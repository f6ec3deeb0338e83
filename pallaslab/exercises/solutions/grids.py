"""Notebook 1's solutions, and the mistakes learners typically make."""

import jax
from jax.experimental import pallas as pl


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add_vectors(x, y):
    spec = pl.BlockSpec((256,), lambda i: (i,))
    return pl.pallas_call(_add_kernel, grid=(x.shape[0] // 256,), in_specs=[spec, spec],
                          out_specs=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=True)(x, y)


def add_vectors_half_grid(x, y):
    """Wrong: a grid of 2 programs covers half the output."""
    spec = pl.BlockSpec((256,), lambda i: (i,))
    return pl.pallas_call(_add_kernel, grid=(2,), in_specs=[spec, spec],
                          out_specs=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=True)(x, y)


def _scale_kernel(x_ref, o_ref):
    o_ref[...] = 2 * x_ref[...] + 1


def scale_2d(x):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    return pl.pallas_call(_scale_kernel, grid=(x.shape[0] // 8, x.shape[1] // 128),
                          in_specs=[spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


def scale_2d_out_transposed(x):
    """Wrong: the output's index map swaps i and j."""
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    swapped = pl.BlockSpec((8, 128), lambda i, j: (j, i))
    return pl.pallas_call(_scale_kernel, grid=(2, 2), in_specs=[spec], out_specs=swapped,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


def add_2d(x, y):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    return pl.pallas_call(_add_kernel, grid=(2, 2), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)


def add_2d_y_transposed(x, y):
    """Wrong: y's index map swaps i and j."""
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    swapped = pl.BlockSpec((8, 128), lambda i, j: (j, i))
    return pl.pallas_call(_add_kernel, grid=(2, 2), in_specs=[spec, swapped], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)


def _bias_kernel(x_ref, b_ref, o_ref):
    o_ref[...] = x_ref[...] + b_ref[...]


def row_bias(x, b):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    bias = pl.BlockSpec((1, 128), lambda i, j: (0, j))
    return pl.pallas_call(_bias_kernel, grid=(2, 2), in_specs=[spec, bias], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, b)


def row_bias_wrong_block(x, b):
    """Wrong: b's index map follows the row axis i instead of the column axis j."""
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    bias = pl.BlockSpec((1, 128), lambda i, j: (0, i))
    return pl.pallas_call(_bias_kernel, grid=(2, 2), in_specs=[spec, bias], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, b)


SOLUTIONS = {"add-vectors": add_vectors, "scale-2d": scale_2d, "add-2d": add_2d,
             "row-bias": row_bias}
WRONG = {
    "add-vectors": [(add_vectors_half_grid, "output elements no program wrote")],
    "scale-2d": [(scale_2d_out_transposed, "index map looks transposed")],
    "add-2d": [(add_2d_y_transposed, "your y_ref index map looks transposed")],
    "row-bias": [(row_bias_wrong_block, "your b_ref index map reads the wrong blocks")],
}

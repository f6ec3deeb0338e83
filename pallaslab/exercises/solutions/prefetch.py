"""Notebook 4's solutions, and the mistakes learners typically make."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _copy_kernel(ids_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _gather(ids, x, x_map):
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(ids.shape[0],),
        in_specs=[pl.BlockSpec((8, 128), x_map)],
        out_specs=pl.BlockSpec((8, 128), lambda i, ids_ref: (i, 0)))
    return pl.pallas_call(_copy_kernel, grid_spec=spec, interpret=True,
                          out_shape=jax.ShapeDtypeStruct((8 * ids.shape[0], 128), x.dtype))(ids, x)


def gather_blocks(ids, x):
    return _gather(ids, x, lambda i, ids_ref: (ids_ref[i], 0))


def gather_blocks_ignoring_ids(ids, x):
    """Wrong: x's index map ignores the prefetched ids."""
    return _gather(ids, x, lambda i, ids_ref: (i, 0))


def _scale_kernel(s_ref, x_ref, o_ref, *, own):
    s = s_ref[pl.program_id(0)] if own else s_ref[0]
    o_ref[...] = x_ref[...] * s


def _scale(s, x, own):
    block = pl.BlockSpec((8, 128), lambda i, s_ref: (i, 0))
    spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(s.shape[0],),
                                        in_specs=[block], out_specs=block)
    return pl.pallas_call(functools.partial(_scale_kernel, own=own), grid_spec=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(s, x)


def scale_blocks(s, x):
    return _scale(s, x, True)


def scale_blocks_first_scale(s, x):
    """Wrong: every program reads s[0]."""
    return _scale(s, x, False)


def _expert_kernel(g_ref, x_ref, w_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], w_ref[...])


def _grouped(groups, x, w, w_map):
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(groups.shape[0],),
        in_specs=[pl.BlockSpec((8, 128), lambda i, g: (i, 0)),
                  pl.BlockSpec((None, 128, 128), w_map)],
        out_specs=pl.BlockSpec((8, 128), lambda i, g: (i, 0)))
    return pl.pallas_call(_expert_kernel, grid_spec=spec, interpret=True,
                          out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), x.dtype))(groups, x, w)


def grouped_matmul(groups, x, w):
    return _grouped(groups, x, w, lambda i, g: (g[i], 0, 0))


def grouped_matmul_expert_i(groups, x, w):
    """Wrong: token block i uses expert i, not expert groups[i]."""
    return _grouped(groups, x, w, lambda i, g: (i, 0, 0))


def _expert_k_kernel(g_ref, x_ref, w_ref, o_ref, *, init):
    if init:
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
    o_ref[...] += jnp.dot(x_ref[...], w_ref[...])


def _grouped_k(groups, x, w, init):
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(groups.shape[0], 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, k, g: (i, k)),
                  pl.BlockSpec((None, 128, 128), lambda i, k, g: (g[i], k, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, k, g: (i, 0)))
    return pl.pallas_call(
        functools.partial(_expert_k_kernel, init=init), grid_spec=spec, interpret=True,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), x.dtype))(groups, x, w)


def grouped_matmul_k(groups, x, w):
    return _grouped_k(groups, x, w, True)


def grouped_matmul_k_no_init(groups, x, w):
    """Wrong: the output is never zeroed before the first `+=`."""
    return _grouped_k(groups, x, w, False)


SOLUTIONS = {"gather-blocks": gather_blocks, "scale-blocks": scale_blocks,
             "grouped-matmul": grouped_matmul, "grouped-matmul-k": grouped_matmul_k}
WRONG = {
    "gather-blocks": [(gather_blocks_ignoring_ids, "your x_ref index map")],
    "scale-blocks": [(scale_blocks_first_scale, "the wrong values were written here")],
    "grouped-matmul": [(grouped_matmul_expert_i, "your w_ref index map")],
    "grouped-matmul-k": [(grouped_matmul_k_no_init, "read before its first write")],
}

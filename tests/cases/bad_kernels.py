"""Kernels written wrong on purpose: they spin, leave output unwritten, fail a debug check,
produce NaN, or have malformed BlockSpecs. Used by the bad-input catalog (never the main
catalog: a spinning kernel there would be run by every executor suite)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

ROWS = 8


def _spec():
    return pl.BlockSpec((ROWS, 128), lambda i: (i, 0))


def _call(kernel, x, *, dtype=None, grid=None, in_spec=None, out_spec=None):
    blocks = x.shape[0] // ROWS
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, dtype or x.dtype),
        grid=(blocks,) if grid is None else grid, in_specs=[in_spec or _spec()],
        out_specs=out_spec or _spec(), interpret=True)(x)


def _spin_kernel(x_ref, o_ref):
    # Program 1 never leaves its loop. The float carry keeps XLA from proving the loop has no
    # effect (an integer loop that does nothing may be optimised away).
    def spin(c):
        return c * 0.5 + x_ref[0, 0]

    limit = jnp.where(pl.program_id(0) == 1, -1.0, 1e30)
    n = jax.lax.while_loop(lambda c: c > limit, spin, jnp.float32(1e31))
    o_ref[...] = x_ref[...] + n * 0.0  # uses n, so the loop cannot be dropped


def spins_in_program_1(x):
    """Program (1,) spins for ever; the others finish."""
    return _call(_spin_kernel, x)


def _skip_odd_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(0) % 2 == 0)
    def _():
        o_ref[...] = x_ref[...] + 1


def skips_odd_programs(x):
    """Odd programs write nothing: half the output is never written."""
    return _call(_skip_odd_kernel, x)


def skips_odd_programs_int(x):
    return _call(_skip_odd_kernel, x.astype(jnp.int32))


def _check_kernel(x_ref, o_ref):
    pl.debug_check(jnp.all(x_ref[...] < 100.0), "values must stay below 100")
    o_ref[...] = x_ref[...] * 2


def fails_debug_check(x):
    return _call(_check_kernel, x)


def _nan_kernel(x_ref, o_ref):
    o_ref[...] = jnp.log(x_ref[...] - 10.0)  # NaN for every x < 10


def makes_nan(x):
    return _call(_nan_kernel, x)


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def copy(x):
    return _call(_copy_kernel, x)


def index_map_takes_two(x):
    return _call(_copy_kernel, x, in_spec=pl.BlockSpec((ROWS, 128), lambda i, j: (i, 0)))


def index_map_returns_floats(x):
    return _call(_copy_kernel, x, in_spec=pl.BlockSpec((ROWS, 128), lambda i: (i / 2, 0)))


def writes_float64(x):
    return _call(_copy_kernel, x, dtype=jnp.float64)


def negative_grid(x):
    return _call(_copy_kernel, x, grid=(-2,))


def empty_grid(x):
    return _call(_copy_kernel, x, grid=(0,))


def user_bug_while_tracing(x):
    return _call(_copy_kernel, x) / undefined_name  # noqa: F821 - the user's own bug


def no_kernel(x):
    return jnp.sin(x)


def x():
    """The input every catalog entry uses: 4 blocks of (8, 128)."""
    return jnp.arange(4 * ROWS * 128, dtype=jnp.float32).reshape(4 * ROWS, 128) / 1000.0


def nan_case():
    """A case (for the CLI): a kernel whose every output is NaN."""
    return makes_nan, (x(),)

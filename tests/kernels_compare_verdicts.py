"""Kernels and references behind the comparison verdicts of issue 24 (compare, run, the
magic): each shows a class of false verdict (`test_verdicts_compare.py`). Cases for the CLI:
`tests/kernels_compare_verdicts.py:NAME`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

F32 = jnp.float32


def _ones(x_ref, o_ref):
    o_ref[...] = jnp.ones_like(o_ref)


def parallel_one_block():
    """Four "parallel" programs all writing output block (0, 0): executors that run programs
    in turn agree with the reference; `check` finds parallel-write-conflict."""

    def fn(x):
        return pl.pallas_call(
            _ones, grid=(4,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            out_shape=jax.ShapeDtypeStruct((8, 128), F32),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x)

    return fn, (jnp.zeros((32, 128), F32),)


def ones_reference(x):
    return jnp.ones((8, 128), F32)


def _twice(x_ref, o_ref):
    o_ref[...] = x_ref[...] + x_ref[...]


def _skip_odd(x_ref, o_ref):
    @pl.when(pl.program_id(0) % 2 == 0)
    def _():
        o_ref[...] = x_ref[...] + x_ref[...]


def _int8_blocks(body):
    def fn(x):
        return pl.pallas_call(
            body, grid=(8,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    x = np.random.default_rng(0).integers(-128, 128, (64, 128)).astype(np.int8)
    x[0, :4] = -64  # x + x = -128 (wraps): the interpreters' fill for unwritten int8
    return fn, (jnp.asarray(x),)


def int8_twice():
    return _int8_blocks(_twice)


def int8_skip_odd():
    """Odd programs write nothing: their blocks keep the fill."""
    return _int8_blocks(_skip_odd)


def twice_reference(x):
    return x + x


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def double():
    def fn(x):
        return pl.pallas_call(
            _double, grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((16, 128), F32))(x)

    return fn, (jnp.ones((16, 128), F32),)


def python_reference(x):
    """Not jittable: Python control flow on a value, and NumPy."""
    if float(x[0, 0]) > 0:
        return jnp.asarray(np.asarray(x) * 2.0)
    return x


_KEPT: list = []


def leaky_reference(x):
    """Returns a tracer kept from a transformation it ran (once) under."""
    if not _KEPT:
        jax.jit(lambda y: _KEPT.append(y * 2.0) or y)(x)
    return _KEPT[0]

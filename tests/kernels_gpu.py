"""Catalog kernels for the Triton backend, modelled on JAX's own Pallas Triton tests: whole-array
refs with masked `pl.ds` loads and stores, atomics, and a truly overlapping write.

Each case registers in the shared `CATALOG` (tag "gpu" plus the feature's own tag).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from catalog import case, rand
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

__all__ = ["atomic_block_sums", "atomic_exchange", "masked_row_softmax", "masked_vector_add",
           "overlapping_stores"]

TRITON = plt.CompilerParams(num_warps=4)
BLOCK = 64


def _masked_add_kernel(x_ref, y_ref, o_ref):
    start = pl.program_id(0) * BLOCK
    mask = start + jnp.arange(BLOCK) < x_ref.shape[0]
    window = pl.ds(start, BLOCK)
    x = plt.load(x_ref.at[window], mask=mask, other=0.0)
    y = plt.load(y_ref.at[window], mask=mask, other=0.0)
    plt.store(o_ref.at[window], x + y, mask=mask)


@case("gpu", "masked", reference=lambda x, y: x + y)
def masked_vector_add():
    """200 elements in 64-element programs: the last program's stores are masked off past
    the end. Every window is the whole array; no element is stored twice."""

    def fn(x, y):
        return pl.pallas_call(_masked_add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(pl.cdiv(x.shape[0], BLOCK),), compiler_params=TRITON)(x, y)

    return fn, (rand((200,)), rand((200,), seed=1))


def _masked_softmax_kernel(x_ref, o_ref, *, cols: int):
    row = pl.program_id(0)
    mask = jnp.arange(x_ref.shape[1]) < cols
    x = plt.load(x_ref.at[row, :], mask=mask, other=-jnp.inf)
    e = jnp.exp(x - jnp.max(x))
    plt.store(o_ref.at[row, :], e / jnp.sum(e), mask=mask)
    plt.store(o_ref.at[row, :], jnp.zeros_like(e), mask=~mask)  # the padding, stored apart


def _masked_softmax_reference(x):
    return jnp.concatenate([jax.nn.softmax(x[:, :50], axis=-1), jnp.zeros_like(x[:, 50:])], 1)


@case("gpu", "masked", reference=_masked_softmax_reference)
def masked_row_softmax():
    """One program per row of a (16, 64) array holding 50 real columns: two masked stores
    into complementary elements of the row."""

    def fn(x):
        kernel = functools.partial(_masked_softmax_kernel, cols=50)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0],), compiler_params=TRITON)(x)

    return fn, (rand((16, 64)),)


def _block_sums_kernel(x_ref, acc_ref, o_ref):
    del acc_ref  # aliased with o_ref: the zeros the sums are added to
    x = x_ref[pl.ds(pl.program_id(0) * BLOCK, BLOCK)]
    plt.atomic_add(o_ref, pl.ds(0, 1), jnp.sum(x, keepdims=True))


def _block_sums_reference(x):
    return jnp.sum(x, keepdims=True)


@case("gpu", "atomic", reference=_block_sums_reference)
def atomic_block_sums():
    """Every program adds its block's sum into the one-element output: atomics, no race."""

    def fn(x):
        return pl.pallas_call(
            _block_sums_kernel, out_shape=jax.ShapeDtypeStruct((1,), x.dtype),
            grid=(x.shape[0] // BLOCK,), compiler_params=TRITON,
            input_output_aliases={1: 0})(x, jnp.zeros((1,), x.dtype))

    return fn, (rand((256,)),)


def _exchange_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    plt.atomic_xchg(o_ref, pl.ds(i, 1), x_ref[pl.ds(i, 1)] * 2.0)


@case("gpu", "atomic", reference=lambda x: x * 2.0)
def atomic_exchange():
    """`atomic_xchg` into each program's own element (JAX's HLO interpreter cannot run it)."""

    def fn(x):
        return pl.pallas_call(_exchange_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0],), compiler_params=TRITON)(x)

    return fn, (rand((8,)),)


def _overlapping_kernel(x_ref, o_ref):
    window = pl.ds(pl.program_id(0) * 32, 64)  # 64 wide, 32 apart: neighbours overlap
    o_ref[window] = x_ref[window] * 2.0


@case("gpu", "racy", findings=("parallel-write-conflict",))
def overlapping_stores():
    """Programs store 64 elements 32 apart: each element but the ends is stored by two
    programs that may run at the same time."""

    def fn(x):
        return pl.pallas_call(_overlapping_kernel,
                              out_shape=jax.ShapeDtypeStruct((160,), x.dtype),
                              grid=(4,), compiler_params=TRITON)(x)

    return fn, (rand((160,)),)

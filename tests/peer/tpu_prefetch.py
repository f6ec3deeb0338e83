"""Peers from tpu_pallas_test.py's PallasCallScalarPrefetchTest and PallasCallDynamicGridTest:
scalar-prefetch operands read by index maps and bodies, and grids sized by traced values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from registry import peer

ORIGIN = "tpu_pallas_test.py::"
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)


def _f32(shape, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


# --- test_trivial_scalar_prefetch: the index map picks block s[i] --------------------------


def _copy_block(s_ref, x_ref, o_ref):
    del s_ref
    o_ref[...] = x_ref[...]


def _trivial_prefetch(s, x):
    return pl.pallas_call(
        _copy_block, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(4,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, s_ref: (s_ref[i], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, s_ref: (i, 0))))(s, x)



@peer("scalar-prefetch", ORIGIN + "PallasCallScalarPrefetchTest::test_trivial_scalar_prefetch",
      backend="tpu", reference=lambda s, x: x.reshape(4, 8, 128)[s].reshape(32, 128))
def trivial_scalar_prefetch():
    return _trivial_prefetch, (jnp.array([3, 1, 0, 2], jnp.int32), _f32((32, 128)))


# --- test_multiple_scalar_prefetch: two prefetched arrays, both read by the index map ------


def _two_prefetch_body(s1_ref, s2_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + s2_ref[pl.program_id(0)].astype(jnp.float32)
    del s1_ref


def _multiple_prefetch(s1, s2, x):
    return pl.pallas_call(
        _two_prefetch_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(4,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, a, b: (a[i], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, a, b: (i, 0))))(s1, s2, x)


def _multiple_prefetch_reference(s1, s2, x):
    blocks = x.reshape(4, 8, 128)[s1] + s2[:, None, None].astype(jnp.float32)
    return blocks.reshape(32, 128)


@peer("scalar-prefetch", ORIGIN + "PallasCallScalarPrefetchTest::test_multiple_scalar_prefetch",
      backend="tpu", reference=_multiple_prefetch_reference)
def multiple_scalar_prefetch():
    return _multiple_prefetch, (jnp.array([2, 2, 0, 1], jnp.int32),
                                jnp.array([10, 20, 30, 40], jnp.int32), _f32((32, 128)))


# --- test_input_output_aliasing_with_scalar_prefetch --------------------------------------


def _alias_prefetch_body(s_ref, x_ref, o_ref):
    del s_ref
    o_ref[...] = x_ref[...] * 2.0


def _alias_with_prefetch(s, x):
    return pl.pallas_call(
        _alias_prefetch_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(4,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, s_ref: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, s_ref: (i, 0))),
        input_output_aliases={1: 0})(s, x)


@peer("scalar-prefetch", ORIGIN + "PallasCallScalarPrefetchTest::"
      "test_input_output_aliasing_with_scalar_prefetch", backend="tpu",
      reference=lambda s, x: x * 2.0)
def input_output_aliasing_with_scalar_prefetch():
    return jax.jit(_alias_with_prefetch), (jnp.zeros((4,), jnp.int32), _f32((32, 128)))


# --- test_scalar_interpreter: SMEM scalar arithmetic in a loop ----------------------------


def _smem_sum_body(s_ref, o_ref):
    def step(i, acc):
        return acc + s_ref[i]

    o_ref[0] = jax.lax.fori_loop(0, s_ref.shape[0], step, jnp.int32(0))


def _smem_sum(s):
    return pl.pallas_call(_smem_sum_body, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
                          in_specs=[SMEM], out_specs=SMEM)(s)


@peer("scalar-prefetch", ORIGIN + "PallasCallTest::test_sum_in_smem", backend="tpu",
      reference=lambda s: s.sum(keepdims=True))
def sum_in_smem():
    return _smem_sum, (jnp.arange(16, dtype=jnp.int32),)


# --- PallasCallDynamicGridTest.test_dynamic_grid: grid size from a traced scalar ----------


def _count_programs_body(o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += 1.0


@jax.jit
def _dynamic_grid(n):
    return pl.pallas_call(
        _count_programs_body, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        grid=(n[0],), out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)))()


@peer("dynamic-grid", ORIGIN + "PallasCallDynamicGridTest::test_dynamic_grid", backend="tpu",
      reference=lambda n: jnp.full((8, 128), n[0], jnp.float32))
def dynamic_grid():
    return _dynamic_grid, (jnp.array([5], jnp.int32),)


# --- test_num_programs: pl.num_programs in a 2-D grid -------------------------------------


def _num_programs_body(o_ref):
    o_ref[0, 0] = pl.num_programs(0) * 10 + pl.num_programs(1)


def _num_programs(x):
    return pl.pallas_call(
        _num_programs_body, out_shape=jax.ShapeDtypeStruct((1, 1), jnp.int32), grid=(2, 3),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM))()


@peer("dynamic-grid", ORIGIN + "PallasCallDynamicGridTest::test_num_programs", backend="tpu",
      reference=lambda x: jnp.full((1, 1), 23, jnp.int32))
def num_programs():
    return _num_programs, (jnp.zeros((1,), jnp.int32),)


# --- test_dynamic_grid_scalar_input: a traced grid whose body reads a scalar input --------


def _scaled_count_body(s_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += s_ref[0].astype(jnp.float32)


@jax.jit
def _dynamic_grid_scalar(n, s):
    return pl.pallas_call(
        _scaled_count_body, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        grid=(n[0],), in_specs=[SMEM],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)))(s)


@peer("dynamic-grid", ORIGIN + "PallasCallDynamicGridTest::test_dynamic_grid_scalar_input",
      backend="tpu",
      reference=lambda n, s: jnp.full((8, 128), n[0] * s[0], jnp.float32))
def dynamic_grid_scalar_input():
    return _dynamic_grid_scalar, (jnp.array([3], jnp.int32), jnp.array([7], jnp.int32))

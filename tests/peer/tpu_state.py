"""Peers from tpu_pallas_state_test.py: `pl.kernel` and `pl.core_map` over a TensorCore mesh,
and `pl.run_state` around a pallas_call."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from registry import peer

ORIGIN = "tpu_pallas_state_test.py::"
ANY = pl.BlockSpec(memory_space=pl.ANY)


def _f32(shape, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def _mesh():
    return pltpu.TensorCoreMesh(axis_name="core", num_cores=1)


# --- CoreMapTest.test_kernel_helper_basic ---------------------------------------------------


def _add_one_hbm(x_hbm, o_hbm):
    def inner(buf):
        pltpu.sync_copy(x_hbm, buf)
        buf[...] = buf[...] + 1.0
        pltpu.sync_copy(buf, o_hbm)

    pl.run_scoped(inner, pltpu.VMEM((8, 128), jnp.float32))


@peer("core_map", ORIGIN + "CoreMapTest::test_kernel_helper_basic", backend="tpu",
      reference=lambda x: x + 1.0)
def kernel_helper_basic():
    def fn(x):
        return pl.kernel(_add_one_hbm, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         mesh=_mesh())(x)
    return fn, (_f32((8, 128)),)


# --- CoreMapTest.test_kernel_helper_with_scratch -------------------------------------------


def _scratch_double(x_hbm, o_hbm, buf, sem):
    pltpu.async_copy(x_hbm, buf, sem).wait()
    buf[...] = buf[...] * 2.0
    pltpu.async_copy(buf, o_hbm, sem).wait()


@peer("core_map", ORIGIN + "CoreMapTest::test_kernel_helper_with_scratch", backend="tpu",
      reference=lambda x: x * 2.0)
def kernel_helper_with_scratch():
    def fn(x):
        return pl.kernel(_scratch_double, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         mesh=_mesh(), scratch_types=[pltpu.VMEM((8, 128), jnp.float32),
                                                      pltpu.SemaphoreType.DMA])(x)
    return fn, (_f32((8, 128)),)


# --- CoreMapTest.test_kernel_helper_with_out_tree ------------------------------------------


def _two_outputs(x_hbm, plus_hbm, minus_hbm):
    def inner(buf):
        pltpu.sync_copy(x_hbm, buf)
        buf[...] = buf[...] + 1.0
        pltpu.sync_copy(buf, plus_hbm)
        buf[...] = buf[...] - 2.0
        pltpu.sync_copy(buf, minus_hbm)

    pl.run_scoped(inner, pltpu.VMEM((8, 128), jnp.float32))


@peer("core_map", ORIGIN + "CoreMapTest::test_kernel_helper_with_out_tree", backend="tpu",
      reference=lambda x: (x + 1.0, x - 1.0))
def kernel_helper_with_out_tree():
    def fn(x):
        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.kernel(_two_outputs, out_type=(shape, shape), mesh=_mesh())(x)
    return fn, (_f32((8, 128)),)


# --- CoreMapTest.test_basic: core_map inside run_state --------------------------------------


def _core_map_basic(x_ref, y_ref):
    @pl.core_map(_mesh())
    def _():
        def inner(buf):
            pltpu.sync_copy(x_ref, buf)
            buf[...] = buf[...] * 3.0
            pltpu.sync_copy(buf, y_ref)

        pl.run_scoped(inner, pltpu.VMEM((8, 128), jnp.float32))


@peer("core_map", ORIGIN + "CoreMapTest::test_basic", backend="tpu",
      reference=lambda x: x * 3.0)
def core_map_run_state():
    def fn(x):
        _, y = pl.run_state(lambda refs: _core_map_basic(*refs))((x, jnp.zeros_like(x)))
        return y
    return fn, (_f32((8, 128)),)


# --- PallasCallStatefulTest.test_basic_stateful_kernel: a pallas_call closing over refs -----


def _copy_captured(x_ref, y_ref):
    def body(sem):
        pltpu.make_async_copy(x_ref, y_ref, sem).start()
        pltpu.make_async_copy(x_ref, y_ref, sem).wait()

    pl.run_scoped(body, pltpu.SemaphoreType.DMA)


def _stateful(refs):
    x_ref, y_ref = refs
    pl.pallas_call(functools.partial(_copy_captured, x_ref, y_ref), out_shape=[])()


@peer("run_scoped", ORIGIN + "PallasCallStatefulTest::test_basic_stateful_kernel",
      backend="tpu", reference=lambda x: x)
def stateful_kernel_on_refs():
    @jax.jit
    def fn(x):
        _, y = pl.run_state(_stateful)((x, jnp.zeros_like(x)))
        return y
    return fn, (jnp.arange(8 * 128, dtype=jnp.int32).reshape(8, 128),)

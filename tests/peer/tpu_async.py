"""Peers from JAX's tpu_pallas_async_test.py: a DMA started in one `pallas_call` and waited
in the next, its DMA semaphore and in-flight destination passed between them as outputs and
inputs (aliased, so the buffer the DMA writes is the one the second call returns)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from registry import peer

ORIGIN = "tpu_pallas_async_test.py::PallasCallAsyncCopyTest::"
ANY = pl.BlockSpec(memory_space=pl.ANY)
# JAX's interpreters cannot run these ('NotImplementedError: nan + dma_sem'); pallaslab's
# `interpret` passes the semaphore between the calls in program order
# (pallaslab/model/_jax/cross_call_semaphores.py), so each compares against its reference.
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def _x(shape=(8, 128)):
    return jax.random.normal(jax.random.key(0), shape, jnp.float32)


def _start_body(x_ref, aliased_x_ref, o_ref, sem):
    del aliased_x_ref  # x passes through, aliased, so the DMA's source stays alive
    pltpu.make_async_copy(x_ref, o_ref, sem).start()


def _done_body(x_ref, o_ref, sem, aliased_o_ref):
    del aliased_o_ref
    pltpu.make_async_copy(x_ref, o_ref, sem).wait()


def _copy_start(x):
    return pl.pallas_call(
        _start_body,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY], out_specs=(ANY, ANY, SEM), input_output_aliases={0: 0})(x)


def _copy_done(x, out, sem):
    return pl.pallas_call(
        _done_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[ANY, ANY, SEM], out_specs=ANY, input_output_aliases={1: 0})(x, out, sem)


@jax.jit
def _basic_async_copy(x):
    x, out, sem = _copy_start(x)
    return _copy_done(x, out, sem)


@peer("local-dma", ORIGIN + "test_basic_async_copy", backend="tpu", reference=lambda x: x)
def basic_async_copy():
    return _basic_async_copy, (_x(),)


@jax.jit
def _multiple_async_copy(x):
    x, out, sem = _copy_start(x)
    x2, out2, sem2 = _copy_start(x)
    return _copy_done(x, out, sem), _copy_done(x2, out2, sem2)


@peer("semaphores", ORIGIN + "test_multiple_async_copy", backend="tpu",
      reference=lambda x: (x, x))
def multiple_async_copy():
    return _multiple_async_copy, (_x(),)


# --- test_async_slice: start a copy of row `index` of x, wait on it in the next call -------


def _slice_start_body(x_ref, aliased_x_ref, o_ref, sem):
    del aliased_x_ref
    pltpu.make_async_copy(x_ref.at[1], o_ref, sem).start()


def _slice_done_body(x_ref, o_ref, sem, aliased_o_ref):
    del aliased_o_ref
    pltpu.make_async_copy(x_ref.at[1], o_ref, sem).wait()


@jax.jit
def _async_slice(x):
    row = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)
    x, out, sem = pl.pallas_call(
        _slice_start_body,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), row, pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY], out_specs=(ANY, ANY, SEM), input_output_aliases={0: 0})(x)
    return pl.pallas_call(_slice_done_body, out_shape=row, in_specs=[ANY, ANY, SEM],
                          out_specs=ANY, input_output_aliases={1: 0})(x, out, sem)


@peer("local-dma", ORIGIN + "test_async_slice", backend="tpu", reference=lambda x: x[1])
def async_slice():
    return _async_slice, (_x((4, 8, 128)),)

"""Peers from tpu_pallas_test.py's PallasCallDMATest: run_scoped allocations, local DMAs
between HBM, VMEM and SMEM, and DMA / regular semaphores."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from registry import peer

ORIGIN = "tpu_pallas_test.py::PallasCallDMATest::"
ANY = pl.BlockSpec(memory_space=pl.ANY)
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)


def _x(shape=(8, 128), seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def _call(body, x, *, in_spec=ANY, out_spec=ANY, scratch=(), out_shape=None):
    return pl.pallas_call(
        body, out_shape=out_shape or jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[in_spec], out_specs=out_spec, scratch_shapes=list(scratch))(x)


# --- run_scoped -----------------------------------------------------------------------------


def _scoped_body(x_ref, o_ref):
    def inner(tmp):
        tmp[...] = x_ref[...] + 1.0
        o_ref[...] = tmp[...] * 2.0

    pl.run_scoped(inner, pltpu.VMEM((8, 128), jnp.float32))


@peer("run_scoped", ORIGIN + "test_with_scoped_allocation", backend="tpu",
      reference=lambda x: (x + 1.0) * 2.0)
def with_scoped_allocation():
    return (lambda x: _call(_scoped_body, x, in_spec=VMEM, out_spec=VMEM)), (_x(),)


def _nested_scoped_body(x_ref, o_ref):
    def outer(a):
        a[...] = x_ref[...] * 3.0

        def inner(b):
            b[...] = a[...] + 1.0
            o_ref[...] = b[...]

        pl.run_scoped(inner, pltpu.VMEM((8, 128), jnp.float32))

    pl.run_scoped(outer, pltpu.VMEM((8, 128), jnp.float32))


@peer("run_scoped", ORIGIN + "test_nested_scoped_allocation", backend="tpu",
      reference=lambda x: x * 3.0 + 1.0)
def nested_scoped_allocation():
    return (lambda x: _call(_nested_scoped_body, x, in_spec=VMEM, out_spec=VMEM)), (_x(),)


def _scoped_returns_body(x_ref, o_ref):
    def inner(tmp):
        tmp[...] = x_ref[...]
        return tmp[...].sum(axis=0, keepdims=True)

    o_ref[...] = jnp.broadcast_to(pl.run_scoped(inner, pltpu.VMEM((8, 128), jnp.float32)),
                                  o_ref.shape)


@peer("run_scoped", ORIGIN + "test_run_scoped_can_return_vector_values", backend="tpu",
      reference=lambda x: jnp.broadcast_to(x.sum(axis=0, keepdims=True), x.shape))
def run_scoped_returns_vector():
    return (lambda x: _call(_scoped_returns_body, x, in_spec=VMEM, out_spec=VMEM)), (_x(),)


# --- local DMAs -----------------------------------------------------------------------------


def _hbm_hbm_body(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    copy.wait()


@peer("local-dma", ORIGIN + "test_hbm_hbm_dma", backend="tpu", reference=lambda x: x)
def hbm_hbm_dma():
    return (lambda x: _call(_hbm_hbm_body, x, scratch=[pltpu.SemaphoreType.DMA])), (_x(),)


def _hbm_vmem_body(x_hbm, o_ref):
    def inner(buf, sem):
        pltpu.async_copy(x_hbm, buf, sem).wait()
        o_ref[...] = buf[...] + 1.0

    pl.run_scoped(inner, pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA)


@peer("local-dma", ORIGIN + "test_hbm_vmem_dma", backend="tpu", reference=lambda x: x + 1.0)
def hbm_vmem_dma():
    return (lambda x: _call(_hbm_vmem_body, x, out_spec=VMEM)), (_x(),)


def _vmem_hbm_body(x_ref, o_hbm, sem):
    pltpu.async_copy(x_ref, o_hbm, sem).wait()


@peer("local-dma", ORIGIN + "test_vmem_hbm_dma", backend="tpu", reference=lambda x: x)
def vmem_hbm_dma():
    return (lambda x: _call(_vmem_hbm_body, x, in_spec=VMEM,
                            scratch=[pltpu.SemaphoreType.DMA])), (_x(),)


def _slicing_body(x_hbm, o_ref, buf, sem):
    # rows 8..16 of x, by a DMA of a slice of the HBM ref
    pltpu.async_copy(x_hbm.at[pl.ds(8, 8)], buf, sem).wait()
    o_ref[...] = buf[...]


@peer("local-dma", ORIGIN + "test_hbm_vmem_dma_slicing", backend="tpu",
      reference=lambda x: x[8:16])
def hbm_vmem_dma_slicing():
    def fn(x):
        return _call(_slicing_body, x, out_spec=VMEM,
                     out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
                     scratch=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA])
    return fn, (_x((32, 128)),)


def _indexing_body(x_hbm, o_ref, buf, sem):
    pltpu.async_copy(x_hbm.at[2], buf, sem).wait()
    o_ref[...] = buf[...]


@peer("local-dma", ORIGIN + "test_hbm_vmem_dma_indexing", backend="tpu",
      reference=lambda x: x[2])
def hbm_vmem_dma_indexing():
    def fn(x):
        return _call(_indexing_body, x, out_spec=VMEM,
                     out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
                     scratch=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA])
    return fn, (_x((4, 8, 128)),)


def _hbm_smem_body(x_hbm, o_ref, buf, sem):
    pltpu.async_copy(x_hbm, buf, sem).wait()
    o_ref[0] = buf[0] + buf[5]


@peer("local-dma", ORIGIN + "test_hbm_smem_dma", backend="tpu",
      reference=lambda x: x[0:1] + x[5:6])
def hbm_smem_dma():
    def fn(x):
        return _call(_hbm_smem_body, x, out_spec=SMEM,
                     out_shape=jax.ShapeDtypeStruct((1,), x.dtype),
                     scratch=[pltpu.SMEM((16,), jnp.float32), pltpu.SemaphoreType.DMA])
    return fn, (_x((16,)),)


def _vmem_vmem_body(x_ref, o_ref, sem):
    pltpu.async_copy(x_ref, o_ref, sem).wait()


@peer("local-dma", ORIGIN + "test_vmem_vmem_dma", backend="tpu", reference=lambda x: x)
def vmem_vmem_dma():
    return (lambda x: _call(_vmem_vmem_body, x, in_spec=VMEM, out_spec=VMEM,
                            scratch=[pltpu.SemaphoreType.DMA])), (_x(),)


# --- semaphores -----------------------------------------------------------------------------


def _wait_body(x_ref, o_ref, sem):
    pl.semaphore_signal(sem)
    pl.semaphore_wait(sem)
    o_ref[...] = x_ref[...]


@peer("semaphores", ORIGIN + "test_can_wait_on_semaphore", backend="tpu",
      reference=lambda x: x)
def can_wait_on_semaphore():
    return (lambda x: _call(_wait_body, x, in_spec=VMEM, out_spec=VMEM,
                            scratch=[pltpu.SemaphoreType.REGULAR])), (_x(),)


def _array_dynamic_body(x_ref, o_ref, sems):
    # signal every semaphore of the array by its index, read one back through a traced index
    for i in range(4):
        pl.semaphore_signal(sems.at[i], i + 1)
    k = jnp.int32(x_ref.shape[0] // 8 + 1)  # 2, but traced
    count = pl.semaphore_read(sems.at[k])
    for i in range(4):
        pl.semaphore_wait(sems.at[i], i + 1)
    o_ref[...] = x_ref[...] + count.astype(jnp.float32)


@peer("semaphores", ORIGIN + "test_can_wait_on_semaphore_array_with_dynamic_index",
      backend="tpu", reference=lambda x: x + 3.0)
def semaphore_array_dynamic_index():
    return (lambda x: _call(_array_dynamic_body, x, in_spec=VMEM, out_spec=VMEM,
                            scratch=[pltpu.SemaphoreType.REGULAR((4,))])), (_x(),)


def _read_dma_sem_body(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm, buf, sem)
    copy.start()
    copy.wait()
    # after the wait the DMA semaphore is back to 0
    o_ref[...] = buf[...] + pl.semaphore_read(sem).astype(jnp.float32)


@peer("semaphores", ORIGIN + "test_can_read_dma_semaphore", backend="tpu",
      reference=lambda x: x)
def can_read_dma_semaphore():
    return (lambda x: _call(_read_dma_sem_body, x, out_spec=VMEM,
                            scratch=[pltpu.VMEM((8, 128), jnp.float32),
                                     pltpu.SemaphoreType.DMA])), (_x(),)


def _double_buffer_body(x_hbm, o_hbm, bufs, sems):
    # a 2-slot ring: fetch block i+1 while block i is doubled and written back
    n = x_hbm.shape[0] // 8

    def fetch(i, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * 8, 8)], bufs.at[slot], sems.at[slot])

    fetch(0, 0).start()

    def step(i, carry):
        slot = i % 2

        @pl.when(i + 1 < n)
        def _next():
            fetch(i + 1, 1 - slot).start()

        fetch(i, slot).wait()
        bufs[slot] = bufs[slot] * 2.0
        pltpu.sync_copy(bufs.at[slot], o_hbm.at[pl.ds(i * 8, 8)])
        return carry

    jax.lax.fori_loop(0, n, step, 0)


@peer("local-dma", ORIGIN + "test_hbm_hbm_grid_dma", backend="tpu",
      reference=lambda x: x * 2.0)
def double_buffered_dma_loop():
    return (lambda x: _call(_double_buffer_body, x,
                            scratch=[pltpu.VMEM((2, 8, 128), jnp.float32),
                                     pltpu.SemaphoreType.DMA((2,))])), (_x((32, 128)),)

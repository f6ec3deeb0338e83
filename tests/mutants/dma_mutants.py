"""Single-bug TPU kernels with manual DMAs (run under TPU interpret mode), and their
originals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mutant_registry import mutant, original

ANY = pl.BlockSpec(memory_space=pl.ANY)
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
TPU_INTERPRET = ("tpu-interpret", "reference")


def plus_one(x):
    return x + 1.0


def _x():
    return jax.random.normal(jax.random.key(0), (16, 128), jnp.float32)


def _call(body, x, *, semaphores=1):
    return pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY],
        out_specs=VMEM,
        scratch_shapes=[pltpu.VMEM(x.shape, jnp.float32),
                        *[pltpu.SemaphoreType.DMA] * semaphores])(x)


def _copy_body(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm, buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...] + 1.0


@original(plus_one, TPU_INTERPRET)
def dma_copy_ok():
    return (lambda x: _call(_copy_body, x)), (_x(),)


def _no_wait_body(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm, buf, sem)
    copy.start()  # the bug: no copy.wait() before buf is read
    o_ref[...] = buf[...] + 1.0


@mutant("dma_copy_ok", "the DMA is started but never waited on", plus_one,
        kind="first-visit", words=("scratch[0] (buf)", "a DMA writes it"),
        executors=TPU_INTERPRET)
def dma_missing_wait():
    return (lambda x: _call(_no_wait_body, x)), (_x(),)


def _wrong_sem_body(x_hbm, o_ref, buf, sem, other):
    pltpu.make_async_copy(x_hbm, buf, sem).start()
    pltpu.make_async_copy(x_hbm, buf, other).wait()  # the bug: waits on another semaphore
    o_ref[...] = buf[...] + 1.0


@mutant("dma_copy_ok", "the wait is on a semaphore the copy does not signal", plus_one,
        finding="deadlock", executors=TPU_INTERPRET)
def dma_wrong_semaphore():
    return (lambda x: _call(_wrong_sem_body, x, semaphores=2)), (_x(),)

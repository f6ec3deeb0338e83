"""Catalog kernels that talk between devices: `shard_map` + remote DMAs + semaphores, modelled
on JAX's distributed Pallas TPU guide and tests (right permute, ring all-gather, ring
all-reduce, reduce-scatter) and a kernel that deadlocks.

Every function builds its mesh from `jax.devices()`, so it traces on any device count: here
(one CPU device, a ring of one) and in a worker with N simulated devices
(`pallaslab.compare(..., devices=N)`). Inputs are (32, 128) f32: one (8, 128) shard per device
on 4 devices; the references run where the kernels run and use that device count.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from catalog import case, rand
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

__all__ = [
    "missing_signal",
    "reduce_scatter",
    "remote_write_race",
    "right_permute",
    "ring_all_gather",
    "ring_all_gather_wrong_neighbour",
    "ring_all_reduce",
]

SHARD = (8, 128)
ANY = pl.BlockSpec(memory_space=pl.ANY)


def _mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.device_count(),), ("x",),
                         axis_types=(jax.sharding.AxisType.Auto,))


def _on_devices(kernel):
    return jax.shard_map(kernel, mesh=_mesh(), in_specs=P("x"), out_specs=P("x"),
                         check_vma=False)


def _neighbour(step: int = 1):
    me = jax.lax.axis_index("x")
    return jax.lax.rem(me + step, jax.lax.axis_size("x"))


# --- right permute ------------------------------------------------------------------------


def _right_permute_body(x_ref, o_ref, send_sem, recv_sem):
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id=(_neighbour(),))
    copy.start()
    copy.wait()


def _right_permute(x):
    def kernel(shard):  # the local shard: (8, 128) on 4 devices for a (32, 128) input
        return pl.pallas_call(
            _right_permute_body, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            in_specs=[ANY], out_specs=ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])(shard)

    return _on_devices(kernel)(x)


def _right_permute_reference(x):
    return jnp.roll(x.reshape(jax.device_count(), -1, x.shape[1]), 1, axis=0).reshape(x.shape)


@case("multi-device", "remote-dma", reference=_right_permute_reference)
def right_permute():
    """Each device sends its shard to its right neighbour (one remote DMA)."""
    return _right_permute, (rand((4 * SHARD[0], SHARD[1])),)


# --- ring all-gather ----------------------------------------------------------------------


def _all_gather_body(x_ref, o_ref, local_sem, send_sem, recv_sems, shift=1):
    step = pl.program_id(0)
    me = jax.lax.axis_index("x")
    n = jax.lax.axis_size("x")

    @pl.when(step == 0)
    def _():
        local = pltpu.make_async_copy(x_ref, o_ref.at[me], local_sem)
        local.start()
        local.wait()

    slot = jax.lax.rem(me - step + n, n)  # the shard this device forwards at this step
    copy = pltpu.make_async_remote_copy(o_ref.at[slot], o_ref.at[slot], send_sem,
                                        recv_sems.at[step], device_id=(_neighbour(shift),))
    copy.start()
    copy.wait()


def _all_gather(x, shift=1):
    n = jax.device_count()

    def kernel(shard):
        def body(*refs):  # (a closure, not functools.partial: JAX then names the user's line)
            _all_gather_body(*refs, shift=shift)

        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct((n, *shard.shape), shard.dtype),
            grid=(max(n - 1, 1),), in_specs=[ANY], out_specs=ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA((max(n - 1, 1),))])(shard)

    return _on_devices(kernel)(x)


def _all_gather_reference(x):  # every device ends with all shards, in device order
    n = jax.device_count()
    shards = x.reshape(n, -1, x.shape[1])
    return jnp.tile(shards, (n, 1, 1))


@case("multi-device", "remote-dma", "ring", reference=_all_gather_reference)
def ring_all_gather():
    """Ring all-gather: at each of n - 1 steps every device forwards the shard it received
    last to its right neighbour; each ends with all n shards."""
    return _all_gather, (rand((4 * SHARD[0], SHARD[1])),)


@case("multi-device", "remote-dma", "ring", "bug", reference=_all_gather_reference)
def ring_all_gather_wrong_neighbour():
    """The ring all-gather with a typo: every device sends two devices to the right."""
    return functools.partial(_all_gather, shift=2), (rand((4 * SHARD[0], SHARD[1])),)


# --- ring all-reduce and reduce-scatter ---------------------------------------------------


def _ring_sum_body(x_ref, o_ref, buf_ref, copy_sem, send_sem, recv_sem, ready_sem, *,
                   steps: int):
    """o = the sum of every device's x: n - 1 ring steps, each sending the running partial to
    the right neighbour; `ready_sem` tells the left neighbour its buffer is free again."""
    local = pltpu.make_async_copy(x_ref, o_ref, copy_sem)
    local.start()
    local.wait()
    left = _neighbour(-1 + jax.lax.axis_size("x"))
    for i in range(steps):
        src = x_ref if i == 0 else buf_ref.at[i % 2]
        copy = pltpu.make_async_remote_copy(src, buf_ref.at[(i + 1) % 2], send_sem, recv_sem,
                                            device_id=(_neighbour(),))
        copy.start()
        copy.wait()
        o_ref[...] += buf_ref[(i + 1) % 2]
        # The left neighbour may overwrite our receive buffer only after we read it.
        pl.semaphore_signal(ready_sem, 1, device_id=(left,))
        pl.semaphore_wait(ready_sem, 1)


def _ring_sum(x, *, scatter: bool):
    n = jax.device_count()
    body = functools.partial(_ring_sum_body, steps=n - 1)

    def kernel(shard):
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM((2, *shard.shape), shard.dtype),
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR])(shard)

    def keep_mine(total):  # reduce-scatter: device i keeps the i-th slice of the rows
        rows = total.shape[0] // n
        return jax.lax.dynamic_slice_in_dim(total, jax.lax.axis_index("x") * rows, rows)

    return _on_devices(lambda s: keep_mine(kernel(s)) if scatter else kernel(s))(x)


def _sum_reference(x):
    n = jax.device_count()
    return jnp.tile(x.reshape(n, -1, x.shape[1]).sum(axis=0), (n, 1))


def _reduce_scatter_reference(x):
    n = jax.device_count()
    return x.reshape(n, -1, x.shape[1]).sum(axis=0)


@case("multi-device", "remote-dma", "ring", "semaphore", reference=_sum_reference)
def ring_all_reduce():
    """Ring all-reduce (sum): n - 1 steps, each passing the running partial to the right; a
    regular semaphore signalled to the left neighbour says its receive buffer is free."""
    return functools.partial(_ring_sum, scatter=False), (rand((4 * SHARD[0], SHARD[1])),)


@case("multi-device", "remote-dma", "ring", "semaphore", reference=_reduce_scatter_reference)
def reduce_scatter():
    """Reduce-scatter: the ring sum, then device i keeps its own rows of it."""
    return functools.partial(_ring_sum, scatter=True), (rand((4 * SHARD[0], SHARD[1])),)


# --- a deadlock ---------------------------------------------------------------------------


def _missing_signal_body(x_ref, o_ref, sem):
    pl.semaphore_wait(sem, 1)  # no device ever signals it
    o_ref[...] = x_ref[...]


def _missing_signal(x):
    def kernel(shard):
        return pl.pallas_call(
            _missing_signal_body, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR])(shard)

    return _on_devices(kernel)(x)


@case("multi-device", "semaphore", "deadlock", findings=("unsignalled-wait",),
      reference=lambda x: x)
def missing_signal():
    """Every device waits on a semaphore no one signals: a deadlock."""
    return _missing_signal, (rand((4 * SHARD[0], SHARD[1])),)


# --- a race between devices -----------------------------------------------------------------


def _overwrite_before_wait_body(x_ref, o_ref, send_sem, recv_sem):
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id=(_neighbour(),))
    copy.start()
    o_ref[...] = jnp.zeros_like(o_ref)  # bug: the left neighbour's copy may land before or after
    copy.wait()


def _overwrite_before_wait(x):
    def kernel(shard):
        return pl.pallas_call(
            _overwrite_before_wait_body,
            out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            in_specs=[ANY], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])(shard)

    return _on_devices(kernel)(x)


@case("multi-device", "remote-dma", "race", reference=_right_permute_reference)
def remote_write_race():
    """Each device zeroes its output while its left neighbour's copy into it is in flight."""
    return _overwrite_before_wait, (rand((4 * SHARD[0], SHARD[1])),)

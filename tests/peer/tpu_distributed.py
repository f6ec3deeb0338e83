"""Peers from tpu_pallas_distributed_test.py and tpu_all_gather_test.py: kernels inside
`shard_map` that DMA to other devices, run on 4 simulated devices (JAX's all-gather on 2: see
its section). The mesh is built from `jax.devices()` at call time, so the cases also trace
on one device."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P
from registry import peer

DEVICES = 4
ANY = pl.BlockSpec(memory_space=pl.ANY)
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)


def _x(rows_per_device=8):
    return jax.random.normal(jax.random.key(0), (DEVICES * rows_per_device, 128), jnp.float32)


def _mesh():
    return jax.make_mesh((jax.device_count(),), ("x",),
                         axis_types=(jax.sharding.AxisType.Auto,))


def _run_sharded(kernel, x):
    # the mesh is built at call time, from the devices the run has (a picklable function)
    return jax.shard_map(kernel, mesh=_mesh(), in_specs=P("x"), out_specs=P("x"),
                         check_vma=False)(x)


def _sharded(kernel):
    return functools.partial(_run_sharded, kernel)


def _right():
    return jax.lax.rem(jax.lax.axis_index("x") + 1, jax.lax.axis_size("x"))


def _rolled(x, shift=1):
    n = jax.device_count()
    return jnp.roll(x.reshape(n, -1, x.shape[-1]), shift, axis=0).reshape(x.shape)


# --- PallasCallRemoteDMATest.test_basic_remote_vmem_dma ------------------------------------


def _remote_vmem_body(x_ref, o_ref, send_sem, recv_sem):
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id=(_right(),))
    copy.start()
    copy.wait()


def _basic_remote_vmem_dma_shard(x):
    return pl.pallas_call(
        _remote_vmem_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[VMEM], out_specs=VMEM,
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(x)


@peer("remote-dma", "tpu_pallas_distributed_test.py::PallasCallRemoteDMATest::"
      "test_basic_remote_vmem_dma", backend="tpu", reference=_rolled, devices=DEVICES)
def basic_remote_vmem_dma():
    return _sharded(_basic_remote_vmem_dma_shard), (_x(),)


# --- PallasCallRemoteDMATest.test_pallas_call_axis_index: device id as a mesh-axis dict ----


def _axis_dict_body(x_ref, o_ref, send_sem, recv_sem):
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id={"x": _right()})
    copy.start()
    copy.wait()


def _remote_dma_device_id_dict_shard(x):
    return pl.pallas_call(
        _axis_dict_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[ANY], out_specs=ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(x)


@peer("remote-dma", "tpu_pallas_distributed_test.py::PallasCallRemoteDMATest::"
      "test_device_id_dict_implicit_axis", backend="tpu", reference=_rolled, devices=DEVICES)
def remote_dma_device_id_dict():
    return _sharded(_remote_dma_device_id_dict_shard), (_x(),)


# --- PallasCallRemoteDMATest.test_barrier_semaphore: neighbours handshake, then copy -------


def _barrier_body(x_ref, o_ref, send_sem, recv_sem):
    me = jax.lax.axis_index("x")
    n = jax.lax.axis_size("x")
    left = jax.lax.rem(me + n - 1, n)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, device_id=(left,))
    pl.semaphore_signal(barrier, device_id=(_right(),))
    pl.semaphore_wait(barrier, 2)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id=(_right(),))
    copy.start()
    copy.wait()


def _barrier_semaphore_shard(x):
    return pl.pallas_call(
        _barrier_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[VMEM], out_specs=VMEM,
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        compiler_params=pltpu.CompilerParams(collective_id=0))(x)


@peer("semaphores", "tpu_pallas_distributed_test.py::PallasCallRemoteDMATest::"
      "test_barrier_semaphore", backend="tpu", reference=_rolled, devices=DEVICES)
def barrier_semaphore():
    return _sharded(_barrier_semaphore_shard), (_x(),)


# --- tpu_all_gather_test.py::AllGatherTest::test_all_gather_1d_mesh -------------------------
#
# On 2 devices, not 4. JAX's kernel (jax.experimental.pallas.ops.tpu.all_gather.ag_kernel)
# receives every ring step of a direction on one semaphore (recv_sem[0] / recv_sem[1]) and
# starts step i + 1 after waiting only for its own send and its own receive, so from 3 devices
# on a sender can have two DMAs in flight to one neighbour on one semaphore, and the receiver's
# wait for step i can be met by step i + 1's copy: it then forwards a slot that has not landed
# yet. The kernel relies on DMAs landing in the order they were issued; JAX's test runs on TPU
# v5e hardware only (it skips elsewhere). JAX's own TPU interpreter runs pending DMAs out of
# order (`dma_execution_mode="on_wait"`, its default): on 4 devices, without pallaslab, 10 of
# 10 runs returned a quarter of the output NaN, `detect_races=True` raised RACE DETECTED at
# all_gather.py:99, and `dma_execution_mode="eager"` or one receive semaphore per step gave x.
# pallaslab's compare(devices=4) says the same (data-race findings, a mismatch in most runs).
# On 2 devices each direction has one step, nothing shares a semaphore in flight, and JAX's
# interpreter gives x every time (20 of 20 runs, no race): the peer holds that.
ALL_GATHER_DEVICES = 2


def _all_gather(x, memory_space):
    from jax.experimental.pallas.ops.tpu import all_gather

    return all_gather.all_gather(x, mesh=_mesh(), axis_name="x", memory_space=memory_space)


def _gather_x(key, dtype):  # the test's shape: (devices * leading, ...), one shard per device
    return jax.random.normal(jax.random.key(key), (ALL_GATHER_DEVICES * 8, 128),
                             jnp.float32).astype(dtype)


@peer("collective", "tpu_all_gather_test.py::AllGatherTest::test_all_gather_1d_mesh",
      backend="tpu", reference=lambda x: x, devices=ALL_GATHER_DEVICES)
def all_gather_1d_hbm():
    return functools.partial(_all_gather, memory_space=pl.ANY), (_gather_x(0, jnp.float32),)


@peer("collective", "tpu_all_gather_test.py::AllGatherTest::test_all_gather_1d_mesh",
      backend="tpu", reference=lambda x: x, devices=ALL_GATHER_DEVICES)
def all_gather_1d_vmem():
    return functools.partial(_all_gather, memory_space=pltpu.VMEM), (
        _gather_x(1, jnp.bfloat16),)

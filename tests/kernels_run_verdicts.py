"""Kernels behind the run verdicts of issue 24 (capture and the TPU/GPU interpreters): each shows
a class of wrong verdict (`test_verdicts_runs.py`). Cases for the CLI:
`tests/kernels_run_verdicts.py:NAME`.

- `async_copy_local`, `async_copy_prefetch`, `async_copy_remote`: a DMA started in one
  `pallas_call` and waited in the next, its semaphore (and destination) passed between them as
  an output and then an input (JAX's async-copy pattern, tpu_pallas_async_test.py).
- `core_map_race`: two TPU cores of a `pltpu.core_map` write the same element.
- `tma_read_before_wait` / `tma_read_after_wait`: a Mosaic GPU kernel that reads the SMEM a
  TMA copy writes, without (with) waiting on the copy's barrier.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

F32 = jnp.float32
ANY = pl.BlockSpec(memory_space=pl.ANY)
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def _rows(n: int = 8) -> jax.Array:
    return jnp.arange(n * 128, dtype=F32).reshape(n, 128)


# --- 1. a DMA whose semaphore outlives its kernel ---------------------------------------------


def _start_copy_body(src, src_alias, dst, sem):
    del src_alias  # the source, aliased to an output so it stays alive until the wait
    pltpu.make_async_copy(src, dst, sem).start()


def _wait_copy_body(src, dst, sem, dst_alias):
    del dst_alias
    pltpu.make_async_copy(src, dst, sem).wait()


def _start_copy(x):
    return pl.pallas_call(
        _start_copy_body,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), pl.ANY(x.shape, x.dtype),
                   pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY], out_specs=(ANY, ANY, SEM),
        input_output_aliases={0: 0})(x)


def _wait_copy(x, dst, sem):
    return pl.pallas_call(
        _wait_copy_body, out_shape=pl.ANY(x.shape, x.dtype),
        in_specs=[ANY, ANY, SEM], out_specs=ANY,
        input_output_aliases={1: 0})(x, dst, sem)


def _async_copy(x):
    x, dst, sem = _start_copy(x)
    return _wait_copy(x, dst, sem)


def async_copy_local():
    """Copy x to a new array: the DMA starts in one kernel and is waited in the next."""
    return jax.jit(_async_copy), (_rows(),)


def _start_row_copy_body(index_ref, src, src_alias, dst, sem):
    del src_alias
    pltpu.make_async_copy(src.at[index_ref[0]], dst, sem).start()


def _wait_row_copy_body(src, dst, sem, dst_alias):
    del dst_alias
    pltpu.make_async_copy(src.at[0], dst, sem).wait()  # the wait needs only the shape


def _async_row_copy(x, index):
    x, row, sem = pl.pallas_call(
        _start_row_copy_body,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                   jax.ShapeDtypeStruct(x.shape[1:], x.dtype), pltpu.SemaphoreType.DMA(())),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[ANY], out_specs=(ANY, ANY, SEM)),
        input_output_aliases={1: 0})(index[None], x)
    return pl.pallas_call(
        _wait_row_copy_body, out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
        in_specs=[ANY, ANY, SEM], out_specs=ANY,
        input_output_aliases={1: 0})(x, row, sem)


def async_copy_prefetch():
    """Copy row `index` (a scalar-prefetch operand) of x; started and waited in two kernels."""
    return jax.jit(_async_row_copy), (jnp.arange(4 * 8 * 128, dtype=F32).reshape(4, 8, 128),
                                      jnp.int32(2))


def _start_send_body(src, src_alias, dst, send_sem, recv_sem):
    del src_alias
    me = jax.lax.axis_index("x")
    right = jax.lax.rem(me + 1, jax.lax.axis_size("x"))
    pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=(right,)).start()


def _wait_sent_body(src, send_sem, src_alias):
    del src_alias
    pltpu.make_async_copy(src, src, send_sem).wait()


def _async_send(shard):
    shard, dst, send_sem, recv_sem = pl.pallas_call(
        _start_send_body,
        out_shape=(jax.ShapeDtypeStruct(shard.shape, shard.dtype),
                   pl.ANY(shard.shape, shard.dtype),
                   pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY], out_specs=(ANY, ANY, SEM, SEM),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(has_side_effects=True))(shard)
    shard = pl.pallas_call(
        _wait_sent_body, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
        in_specs=[ANY, SEM], out_specs=ANY, input_output_aliases={0: 0})(shard, send_sem)
    return _wait_copy(shard, dst, recv_sem)


def _right_send(x):
    mesh = jax.make_mesh((jax.device_count(),), ("x",),
                         axis_types=(jax.sharding.AxisType.Auto,))
    return jax.shard_map(_async_send, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                         check_vma=False)(x)


def async_copy_remote():
    """Each device sends its (8, 128) shard to its right neighbour: the remote DMA starts in
    one kernel, its send and receive are waited in two more. Run with devices=2."""
    return jax.jit(_right_send), (_rows(16),)


# --- 2. cores of a mesh kernel that race -----------------------------------------------------


def _both_cores_write_row_0(x_hbm, o_hbm, vbuf, sem):
    core = jax.lax.axis_index("core")
    pltpu.async_copy(x_hbm.at[pl.ds(core * 8, 8)], vbuf, sem).wait()
    vbuf[...] = vbuf[...] + 1.0
    pltpu.async_copy(vbuf, o_hbm.at[pl.ds(0, 8)], sem).wait()  # both cores: rows 0..7


def core_map_race():
    """`pl.kernel` over a 2-core TensorCore mesh whose cores both write output rows 0..7."""
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)

    def fn(x):
        return pl.kernel(_both_cores_write_row_0,
                         out_type=jax.ShapeDtypeStruct((8, 128), x.dtype), mesh=mesh,
                         scratch_types=[pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA])(x)

    return fn, (_rows(16),)


# --- 3. a TMA copy read before its barrier is waited -----------------------------------------


def _scale_copied(x_gmem, o_gmem, x_smem, barrier, *, wait: bool):
    plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
    if wait:
        plgpu.barrier_wait(barrier)
    o_gmem[...] = x_smem[...] * 2.0  # without the wait: SMEM the copy may not have filled


def _tma_read(wait: bool):
    def body(x_gmem, o_gmem, x_smem, barrier):
        _scale_copied(x_gmem, o_gmem, x_smem, barrier, wait=wait)

    fn = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((256,), F32),
                      scratch_types=[plgpu.SMEM((256,), F32), plgpu.Barrier()])
    return fn, (jnp.arange(256, dtype=F32),)


def tma_read_before_wait():
    """Reads the SMEM a TMA copy fills without waiting on the copy's barrier."""
    return _tma_read(wait=False)


def tma_read_after_wait():
    """The same kernel, waiting on the barrier first: correct."""
    return _tma_read(wait=True)


def tma_read_reference(x):
    return x * 2.0

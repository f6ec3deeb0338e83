"""Notebook 6's solutions, and the mistakes learners typically make."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

ANY = pl.BlockSpec(memory_space=pl.ANY)


def _copy_kernel(x_ref, o_ref, sem, *, rows):
    copy = pltpu.make_async_copy(x_ref.at[pl.ds(0, rows)], o_ref.at[pl.ds(0, rows)], sem)
    copy.start()
    copy.wait()


def _dma_copy(x, rows):
    return pl.pallas_call(functools.partial(_copy_kernel, rows=rows), in_specs=[ANY],
                          out_specs=ANY, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.DMA], interpret=True)(x)


def dma_copy(x):
    return _dma_copy(x, x.shape[0])


def dma_copy_half(x):
    """Wrong: copies the first half of the rows only."""
    return _dma_copy(x, x.shape[0] // 2)


def _chunks_kernel(x_hbm, o_hbm, buf, sem, *, chunks):
    for c in range(chunks):
        rows = pl.ds(8 * c, 8)
        pltpu.make_async_copy(x_hbm.at[rows], buf, sem).start()
        pltpu.make_async_copy(x_hbm.at[rows], buf, sem).wait()
        buf[...] = 2 * buf[...]
        pltpu.make_async_copy(buf, o_hbm.at[rows], sem).start()
        pltpu.make_async_copy(buf, o_hbm.at[rows], sem).wait()


def _dma_chunks(x, chunks):
    return pl.pallas_call(functools.partial(_chunks_kernel, chunks=chunks), in_specs=[ANY],
                          out_specs=ANY, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32),
                                          pltpu.SemaphoreType.DMA], interpret=True)(x)


def dma_chunks(x):
    return _dma_chunks(x, x.shape[0] // 8)


def dma_chunks_last_missing(x):
    """Wrong: `range(3)` for four chunks: the last chunk is never written."""
    return _dma_chunks(x, x.shape[0] // 8 - 1)


def _add_block(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def _pipelined(x, y, y_map, grid=(2, 2)):
    def kernel(x_hbm, y_hbm, o_hbm):
        spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
        pltpu.emit_pipeline(_add_block, grid=grid,
                            in_specs=[spec, pl.BlockSpec((8, 128), y_map)],
                            out_specs=spec)(x_hbm, y_hbm, o_hbm)

    return pl.pallas_call(kernel, in_specs=[ANY, ANY], out_specs=ANY,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)


def pipelined_add(x, y):
    return _pipelined(x, y, lambda i, j: (i, j))


def pipelined_add_y_transposed(x, y):
    """Wrong: the inner pipeline's y index map swaps i and j."""
    return _pipelined(x, y, lambda i, j: (j, i))


def pipelined_add_half_grid(x, y):
    """Wrong: the inner grid (1, 2) covers the first row block only."""
    return _pipelined(x, y, lambda i, j: (i, j), grid=(1, 2))


def _permute_kernel(x_ref, o_ref, send_sem, recv_sem, *, step):
    me = jax.lax.axis_index("x")
    peer = jax.lax.rem(me + step, jax.lax.axis_size("x"))
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(peer,))
    copy.start()
    copy.wait()


def _ring(x, step):
    def per_device(shard):
        return pl.pallas_call(
            functools.partial(_permute_kernel, step=step), in_specs=[ANY], out_specs=ANY,
            out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])(shard)

    mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    return jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                         check_vma=False)(x)


def ring_permute(x):
    return _ring(x, 1)


def ring_permute_to_the_left(x):
    """Wrong: each device sends to its left neighbour."""
    return _ring(x, jax.device_count() - 1 if jax.device_count() > 1 else 0)


SOLUTIONS = {"dma-copy": dma_copy, "dma-chunks": dma_chunks, "emit-pipeline": pipelined_add,
             "ring-permute": ring_permute}
WRONG = {
    "dma-copy": [(dma_copy_half, "output elements no program wrote")],
    "dma-chunks": [(dma_chunks_last_missing, "output elements no program wrote")],
    "emit-pipeline": [(pipelined_add_half_grid, "output elements no program wrote"),
                      (pipelined_add_y_transposed,
                       "y index map inside `emit_pipeline` looks transposed")],
    "ring-permute": [(ring_permute_to_the_left, "sent its shard to its left neighbour")],
}

"""Catalog kernels for TPU Pallas beyond BlockSpecs, one per feature, modelled on JAX's own
Pallas TPU tests: in-kernel pipelines (`emit_pipeline`, `pl.BoundedSlice`), manual DMAs and
semaphores, `run_scoped` buffers, mesh kernels (`pl.kernel`, `pl.core_map`, tensorcore and
SparseCore meshes), pipeline modes Pallas rejects when lowering, and the fuser.

Each case registers in the shared `CATALOG` (tag "tpu-advanced" plus the feature's own tag)
with the pure-JAX `reference` its outputs must match. Several trace only under a TPU (their
tracing asks the chip): on a CPU host pallaslab captures them under an abstract TPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from catalog import case, rand
from jax.experimental import pallas as pl
from jax.experimental.pallas import fuser
from jax.experimental.pallas import tpu as pltpu

__all__ = [
    "bounded_slice_pipeline",
    "buffered_three",
    "core_map_kernel", "cross_core_handoff",
    "emit_pipeline_matmul", "emit_pipeline_per_program",
    "fused_scale_add",
    "manual_dma_double_buffer",
    "mesh_kernel",
    "mesh_kernel_default_cores",
    "mixed_element_blocked",
    "run_scoped_sync_copy",
    "semaphore_read_kernel",
    "sparsecore_vector_add",
    "vmem_limit_above_chip",
]

ANY = pl.BlockSpec(memory_space=pl.ANY)


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


# --- in-kernel pipelines -------------------------------------------------------------------


def _matmul_step(x_ref, y_ref, z_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        z_ref[...] = jnp.zeros(z_ref.shape, jnp.float32)

    z_ref[...] += x_ref[...] @ y_ref[...]


def _pipelined_matmul(x_hbm, y_hbm, z_hbm):
    pltpu.emit_pipeline(
        _matmul_step, grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((128, 128), lambda i, j, k: (i, k)),
                  pl.BlockSpec((128, 128), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((128, 128), lambda i, j, k: (i, j)),
    )(x_hbm, y_hbm, z_hbm)


@case("tpu", "tpu-advanced", "pipeline", reference=lambda x, y: x @ y)
def emit_pipeline_matmul():
    """A 256^3 matmul whose pallas_call has no grid: the kernel pipelines 128-blocks from HBM
    itself with `pltpu.emit_pipeline` over an inner (2, 2, 2) grid."""

    def fn(x, y):
        return pl.pallas_call(
            _pipelined_matmul, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32),
            in_specs=[ANY, ANY], out_specs=ANY,
        )(x, y)

    return fn, (rand((256, 256)), rand((256, 256), seed=1))


def _bounded_reference(x):
    rows = jnp.arange(x.shape[0])[:, None, None]
    return jnp.where(rows < 10, x + 10, x)


def _add_ten(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 10


def _bounded_windows(x_hbm, o_hbm, x_vmem, o_vmem):
    pltpu.sync_copy(x_hbm, x_vmem)
    # Row 9 starts at its final value: whether the last window's write-back covers it (the
    # window holds 6 rows, the slice 5) must not change the result.
    rows = jax.lax.broadcasted_iota(jnp.int32, x_vmem.shape, 0)
    o_vmem[...] = jnp.where(rows == 9, x_vmem[...] + 10, x_vmem[...])
    # Rows i*2 .. i*2+i+2 (3, 4 and 5 rows) in a window of at most 6: BoundedSlice blocks.
    spec = pl.BlockSpec((pl.BoundedSlice(6), 8, 256),
                        lambda i, j: (pl.ds(i * 2, i + 3), 0, j), memory_space=pltpu.VMEM)
    pltpu.emit_pipeline(_add_ten, grid=(3, 2), in_specs=spec, out_specs=spec)(x_vmem, o_vmem)
    pltpu.sync_copy(o_vmem, o_hbm)


@case("tpu", "tpu-advanced", "pipeline", "bounded-slice", reference=_bounded_reference)
def bounded_slice_pipeline():
    """An inner pipeline over VMEM scratch whose row windows are `pl.BoundedSlice`s of varying
    length (JAX's test_compute_slice_bounded_slice_vmem): rows 0-9 get +10, the rest are
    copied."""

    def fn(x):
        return pl.pallas_call(
            _bounded_windows, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[ANY], out_specs=ANY,
            scratch_shapes=[pltpu.VMEM((16, 8, 512), jnp.int32),
                            pltpu.VMEM((16, 8, 512), jnp.int32)],
        )(x)

    return fn, (jnp.arange(16 * 8 * 512, dtype=jnp.int32).reshape(16, 8, 512),)


# --- manual DMAs, semaphores, run_scoped ---------------------------------------------------

_ROWS = 64
_BLOCKS = 4


def _double_buffered_copy(x_hbm, o_hbm, buf, out_buf, sems):
    def copy_in(i, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * _ROWS, _ROWS)], buf.at[slot],
                                     sems.at[slot])

    copy_in(0, 0).start()

    def step(i, carry):
        slot = i % 2

        @pl.when(i + 1 < _BLOCKS)
        def _prefetch_next():
            copy_in(i + 1, 1 - slot).start()

        copy_in(i, slot).wait()
        out_buf[...] = buf[slot] * 2.0
        pltpu.sync_copy(out_buf, o_hbm.at[pl.ds(i * _ROWS, _ROWS)])
        return carry

    jax.lax.fori_loop(0, _BLOCKS, step, 0)


@case("tpu", "tpu-advanced", "dma", reference=lambda x: x * 2.0)
def manual_dma_double_buffer():
    """Hand-written double buffering: 64-row blocks copied HBM->VMEM with
    `make_async_copy` on two DMA semaphores (block i+1 in flight while block i is doubled),
    written back with `sync_copy`."""

    def fn(x):
        return pl.pallas_call(
            _double_buffered_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[ANY], out_specs=ANY,
            scratch_shapes=[pltpu.VMEM((2, _ROWS, 128), jnp.float32),
                            pltpu.VMEM((_ROWS, 128), jnp.float32),
                            pltpu.SemaphoreType.DMA((2,))],
        )(x)

    return fn, (rand((_ROWS * _BLOCKS, 128)),)


def _scoped_increment(x_hbm, o_hbm):
    def body(vbuf):
        pltpu.sync_copy(x_hbm, vbuf)
        vbuf[...] = vbuf[...] + 1.0
        pltpu.sync_copy(vbuf, o_hbm)

    pl.run_scoped(body, pltpu.VMEM((128, 128), jnp.float32))


@case("tpu", "tpu-advanced", "dma", "scoped", reference=lambda x: x + 1.0)
def run_scoped_sync_copy():
    """A VMEM buffer allocated inside the kernel with `pl.run_scoped`, filled and drained with
    `pltpu.sync_copy`."""

    def fn(x):
        return pl.pallas_call(
            _scoped_increment, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[ANY], out_specs=ANY,
        )(x)

    return fn, (rand((128, 128)),)


def _signal_read_wait(x_ref, o_ref, sem):
    pl.semaphore_signal(sem, 2)
    count = pl.semaphore_read(sem)
    pl.semaphore_wait(sem, 2)
    o_ref[...] = x_ref[...] + count.astype(jnp.float32)


@case("tpu", "tpu-advanced", "semaphore", reference=lambda x: x + 2.0)
def semaphore_read_kernel():
    """A REGULAR semaphore signalled, read (`pl.semaphore_read` sees 2) and waited on."""

    def fn(x):
        return pl.pallas_call(
            _signal_read_wait, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        )(x)

    return fn, (rand((8, 128)),)


# --- mesh kernels ----------------------------------------------------------------------------


def _triple_my_rows(x_hbm, o_hbm, vbuf, sem):
    rows = pl.ds(jax.lax.axis_index("core") * 8, 8)
    pltpu.async_copy(x_hbm.at[rows], vbuf, sem).wait()
    vbuf[...] = vbuf[...] * 3.0
    pltpu.async_copy(vbuf, o_hbm.at[rows], sem).wait()


@case("tpu", "tpu-advanced", "mesh", reference=lambda x: x * 3.0)
def mesh_kernel():
    """`pl.kernel` over a 2-core tensorcore mesh: each core DMAs its 8 rows to VMEM scratch,
    triples them and DMAs them back."""
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)

    def fn(x):
        return pl.kernel(_triple_my_rows, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         mesh=mesh,
                         scratch_types=[pltpu.VMEM((8, 128), jnp.float32),
                                        pltpu.SemaphoreType.DMA])(x)

    return fn, (rand((16, 128)),)


@case("tpu", "tpu-advanced", "mesh", "asks-chip", reference=lambda x: x * 2.0)
def mesh_kernel_default_cores():
    """A mesh kernel as production kernels write it: `pltpu.TensorCoreMesh` without
    `num_cores`, so tracing asks the TPU how many cores it has (one on v5e)."""

    def doubled(x_hbm, o_hbm, vbuf):
        pltpu.sync_copy(x_hbm, vbuf)
        vbuf[...] = vbuf[...] * 2.0
        pltpu.sync_copy(vbuf, o_hbm)

    def fn(x):
        mesh = pltpu.TensorCoreMesh(axis_name="core")
        return pl.kernel(doubled, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
                         scratch_types=[pltpu.VMEM(x.shape, x.dtype)])(x)

    return fn, (rand((8, 128)),)


def _add_one_per_core(x_ref, y_ref):
    @pl.core_map(pltpu.TensorCoreMesh(axis_name="core", num_cores=2))
    def _per_core():
        def scoped(vbuf, sem):
            rows = pl.ds(jax.lax.axis_index("core") * 8, 8)
            pltpu.async_copy(x_ref.at[rows], vbuf, sem).wait()
            vbuf[...] = vbuf[...] + 1.0
            pltpu.async_copy(vbuf, y_ref.at[rows], sem).wait()

        pl.run_scoped(scoped, pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA)


@case("tpu", "tpu-advanced", "mesh", "scoped", reference=lambda x: x + 1.0)
def core_map_kernel():
    """`pl.core_map` inside `pl.run_state` (JAX's test_core_map): two cores, each adding one to
    its half of the rows through a run_scoped VMEM buffer."""

    def fn(x):
        def stateful(refs):
            _add_one_per_core(*refs)

        _, y = pl.run_state(stateful)((x, jnp.zeros_like(x)))
        return y

    return fn, (rand((16, 128)),)


@case("tpu", "tpu-advanced", "mesh", "sparsecore", findings=("no-sparse-core",),
      reference=lambda x: x + 1)
def sparsecore_vector_add():
    """A SparseCore kernel: `pl.kernel` over a vector-subcore mesh (axes "core" and
    "subcore"); subcore 0 of core 0 adds one to a 16-lane vector."""
    from jax.experimental.pallas import tpu_sc as plsc

    def body(x_hbm, o_hbm, vbuf):
        @pl.when((jax.lax.axis_index("core") == 0) & (jax.lax.axis_index("subcore") == 0))
        def _first_subcore():
            pltpu.sync_copy(x_hbm, vbuf)
            vbuf[...] = vbuf[...] + 1
            pltpu.sync_copy(vbuf, o_hbm)

    def fn(x):
        mesh = plsc.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore",
                                      num_cores=1)
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
                         scratch_types=[pltpu.VMEM(x.shape, x.dtype)])(x)

    return fn, (jnp.arange(16, dtype=jnp.int32),)


# --- what Mosaic rejects only when lowering ---------------------------------------------------


@case("tpu", "tpu-advanced", "pipeline-mode", findings=("tpu-buffer-count",),
      reference=lambda x: x * 2.0)
def buffered_three():
    """An input pipelined with `pl.Buffered(3)`: the interpreters run it, Mosaic TPU supports
    only single and double buffering in a pallas_call's pipeline."""

    def fn(x):
        return pl.pallas_call(
            _double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(3))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)),
        )(x)

    return fn, (rand((256, 128)),)


@case("tpu", "tpu-advanced", "pipeline-mode", findings=("tpu-mixed-element",),
      reference=lambda x: x * 2.0)
def mixed_element_blocked():
    """A block shape mixing `pl.Element` (rows, indexed in elements) with a blocked dimension:
    the interpreters run it, Mosaic TPU wants all dimensions Element or none."""

    def fn(x):
        return pl.pallas_call(
            _double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((pl.Element(64), 128), lambda i: (i * 64, 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)),
        )(x)

    return fn, (rand((256, 128)),)


@case("tpu", "tpu-advanced", "vmem", reference=lambda x: x * 2.0)
def vmem_limit_above_chip():
    """`vmem_limit_bytes` of 100 MiB, above every chip's VMEM: libtpu compiles it anyway
    (the limit is a cap, not a reservation), so no error finding may say otherwise."""

    def fn(x):
        return pl.pallas_call(
            _double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
            in_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((128, 128), lambda i: (i, 0)),
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=100 * 2**20),
        )(x)

    return fn, (rand((256, 128)),)


# --- the fuser -------------------------------------------------------------------------------


def _scale_kernel(x_value_refs, out_value_refs, o_ref, *, x_fn, out_fn):
    pids = (pl.program_id(0),)
    x_values = jax.tree.map(lambda ref: ref[...], x_value_refs)
    out_values = jax.tree.map(lambda ref: ref[...], out_value_refs)
    (o_ref[...],) = out_fn(pids, (), out_values, x_fn(pids, (), x_values) * 2.0)


@fuser.fusible
def _fusible_scale(x: fuser.Fusion, out: fuser.Fusion | None):
    """Doubles x block by block; x's producer is fused into the kernel's prologue and the
    consumer of the result into its epilogue (as JAX's tpu_fusible_matmul_test does)."""
    scaled = jax.ShapeDtypeStruct(x.shape, x.dtype)
    out = out if out is not None else (lambda y: (y,))
    x_fn, x_values, _ = fuser.get_fusion_values(x)
    out_fn, out_values, _ = fuser.get_fusion_values(out, scaled)
    spec = pl.BlockSpec((64, 128), lambda i: (i, 0))
    x_fn, (x_specs,), _ = fuser.pull_block_spec(x_fn, spec, grid_len=1)(x_values)
    (out_spec,) = fuser.push_block_spec(out, spec)(scaled)
    out_fn, (out_value_specs, _), _ = fuser.pull_block_spec(
        out_fn, (out_spec,), grid_len=1)(out_values, scaled)
    return pl.pallas_call(
        functools.partial(_scale_kernel, x_fn=x_fn, out_fn=out_fn),
        out_shape=jax.eval_shape(out, scaled)[0], grid=(x.shape[0] // 64,),
        in_specs=[x_specs, out_value_specs], out_specs=out_spec,
    )(x_values, out_values)


@case("tpu", "tpu-advanced", "fuser",
      reference=lambda x, b: jnp.maximum((jnp.exp(x) + b) * 2.0, 0.0))
def fused_scale_add():
    """`fuser.fuse` of exp(x) + b -> a fusible doubling kernel -> relu: the prologue
    (exp, add of the user's `b`) and the epilogue (relu) are fused into the kernel, which
    reads x and b itself and writes the relu'd block."""

    @fuser.fuse
    def fn(x, b):
        y = jnp.exp(x) + b
        return jnp.maximum(_fusible_scale(y), 0.0)

    return jax.jit(fn), (rand((256, 128)), rand((256, 128), seed=1))


# --- a nested pipeline per outer program ----------------------------------------------------


def _rows_of_my_program(x_hbm, o_hbm):
    # Program i of the kernel's grid pipelines its own 4 row blocks: the inner index maps
    # use the outer program id.
    i = pl.program_id(0)
    spec = pl.BlockSpec((8, 128), lambda j: (i * 4 + j, 0))
    pltpu.emit_pipeline(_double, grid=(4,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)


@case("tpu", "tpu-advanced", "pipeline", reference=lambda x: x * 2.0)
def emit_pipeline_per_program():
    """A gridded pallas_call whose programs each run an inner `emit_pipeline` over their own
    rows (the megacore pattern): the inner index maps close over `pl.program_id(0)`."""

    def fn(x):
        return pl.pallas_call(
            _rows_of_my_program, grid=(2,),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY], out_specs=ANY,
        )(x)

    return fn, (rand((64, 128)),)


# --- cores that signal each other -----------------------------------------------------------


def _handoff(x_hbm, o_hbm, vbuf, prev, dma, ready):
    core = jax.lax.axis_index("core")

    @pl.when(core == 0)
    def _produce():
        pltpu.async_copy(x_hbm.at[pl.ds(0, 8)], vbuf, dma).wait()
        vbuf[...] = vbuf[...] * 2.0
        pltpu.async_copy(vbuf, o_hbm.at[pl.ds(0, 8)], dma).wait()
        pl.semaphore_signal(ready, 1, core_index=1)  # core 0's rows are in HBM

    @pl.when(core == 1)
    def _consume():
        pl.semaphore_wait(ready, 1)
        pltpu.async_copy(o_hbm.at[pl.ds(0, 8)], prev, dma).wait()
        pltpu.async_copy(x_hbm.at[pl.ds(8, 8)], vbuf, dma).wait()
        vbuf[...] = vbuf[...] + prev[...]
        pltpu.async_copy(vbuf, o_hbm.at[pl.ds(8, 8)], dma).wait()


def _handoff_reference(x):
    top = x[:8] * 2.0
    return jnp.concatenate([top, top + x[8:]])


@case("tpu", "tpu-advanced", "mesh", "semaphore", "cross-core", reference=_handoff_reference)
def cross_core_handoff():
    """Two cores that signal each other (JAX's test_allocate_shared_buffer_in_core_map): core
    0 doubles rows 0-7 into the output and signals core 1 (`core_index=1`); core 1 waits for
    the signal, reads those rows back from HBM and adds them to its own rows 8-15."""
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)

    def fn(x):
        return pl.kernel(_handoff, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
                         scratch_types=[pltpu.VMEM((8, 128), jnp.float32),
                                        pltpu.VMEM((8, 128), jnp.float32),
                                        pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR],
                         )(x)

    return fn, (rand((16, 128)),)

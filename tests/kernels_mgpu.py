"""Catalog kernels for Mosaic GPU (`plgpu.kernel`, TMA copies, barriers), modelled on JAX's
own Mosaic GPU Pallas tests.

Each case registers in the shared `CATALOG` (tag "mosaic-gpu" plus the feature's own tag) with
the pure-JAX `reference` its outputs must match. On a CPU they run under the GPU interpreter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from catalog import case, rand
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

__all__ = ["gpu_emit_pipeline", "gpu_emit_pipeline_out_specs", "mosaic_gpu_pallas_call",
           "tma_blocks", "tma_scale", "warp_specialized"]


def _tma_scale_body(x_gmem, o_gmem, x_smem, barrier):
    plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
    plgpu.barrier_wait(barrier)
    x_smem[...] = x_smem[...] * 2.0 + 1.0
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(x_smem, o_gmem)
    plgpu.wait_smem_to_gmem(0)


@case("mosaic-gpu", "tma", reference=lambda x: x * 2.0 + 1.0)
def tma_scale():
    """A TMA copy into shared memory, a barrier wait, compute in SMEM, a TMA copy back."""
    fn = plgpu.kernel(_tma_scale_body, out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                      scratch_types=[plgpu.SMEM((256,), jnp.float32), plgpu.Barrier()])
    return fn, (rand((256,)),)


def _tma_blocks_body(x_gmem, o_gmem, x_smem, barrier):
    block = jax.lax.axis_index("block")
    window = pl.ds(block * 128, 128)
    plgpu.copy_gmem_to_smem(x_gmem.at[window], x_smem, barrier)
    plgpu.barrier_wait(barrier)
    x_smem[...] = x_smem[...] - 1.0
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(x_smem, o_gmem.at[window])
    plgpu.wait_smem_to_gmem(0)


@case("mosaic-gpu", "tma", "barrier", reference=lambda x: x - 1.0)
def tma_blocks():
    """Two blocks (grid names "block"), each moving its half through its own SMEM buffer
    and barrier."""
    fn = plgpu.kernel(_tma_blocks_body, out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                      grid=(2,), grid_names=("block",),
                      scratch_types=[plgpu.SMEM((128,), jnp.float32), plgpu.Barrier()])
    return fn, (rand((256,)),)


def _warp_specialized_body(x_gmem, o_gmem, x_smem, loaded, ready):
    wg = jax.lax.axis_index("wg")

    @pl.when(wg == 0)
    def _producer():
        plgpu.copy_gmem_to_smem(x_gmem, x_smem, loaded)
        plgpu.barrier_wait(loaded)
        x_smem[...] = x_smem[...] * 3.0
        plgpu.barrier_arrive(ready)

    @pl.when(wg == 1)
    def _consumer():
        plgpu.barrier_wait(ready)
        o_gmem[...] = x_smem[...] + 1.0


@case("mosaic-gpu", "warp-specialized", "barrier", reference=lambda x: x * 3.0 + 1.0)
def warp_specialized():
    """Two warpgroups with different roles (JAX's warps-share-shared-memory test): a producer
    loads and scales a block in SMEM and arrives on a barrier; a consumer waits on it and
    stores the result."""
    fn = plgpu.kernel(_warp_specialized_body,
                      out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                      num_threads=2, thread_name="wg",
                      scratch_types=[plgpu.SMEM((256,), jnp.float32), plgpu.Barrier(),
                                     plgpu.Barrier()])
    return fn, (rand((256,)),)


def _pipeline_in_specs_body(x_gmem, o_gmem):
    def step(indices, x_smem):
        (i,) = indices
        o_gmem[pl.ds(i * 256, 256)] = x_smem[...] * 2.0

    plgpu.emit_pipeline(step, grid=(4,), in_specs=[plgpu.BlockSpec((256,), lambda i: (i,))],
                        max_concurrent_steps=2)(x_gmem)


@case("mosaic-gpu", "emit-pipeline", reference=lambda x: x * 2.0)
def gpu_emit_pipeline():
    """`plgpu.emit_pipeline` streaming (256,) blocks of the input through two SMEM slots
    (TMA copies and barriers inside), each step storing its result to GMEM. (Blocks of 64
    would not compile: a warpgroup's 128 threads need 128-element multiples.)"""
    fn = plgpu.kernel(_pipeline_in_specs_body,
                      out_type=jax.ShapeDtypeStruct((1024,), jnp.float32))
    return fn, (rand((1024,)),)


def _pipeline_out_specs_body(x_gmem, o_gmem):
    def step(_, x_smem, o_smem):
        o_smem[...] = x_smem[...] * 2.0

    spec = plgpu.BlockSpec((64,), lambda i: (i,))
    plgpu.emit_pipeline(step, grid=(4,), in_specs=[spec], out_specs=[spec],
                        max_concurrent_steps=2)(x_gmem, o_gmem)


@case("mosaic-gpu", "emit-pipeline", reference=lambda x: x * 2.0)
def gpu_emit_pipeline_out_specs():
    """`plgpu.emit_pipeline` with output BlockSpecs: its predicated SMEM->GMEM copies, which
    JAX's Mosaic GPU interpreter does not implement, run by pallaslab's rule for them."""
    fn = plgpu.kernel(_pipeline_out_specs_body,
                      out_type=jax.ShapeDtypeStruct((256,), jnp.float32))
    return fn, (rand((256,)),)


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


@case("mosaic-gpu", "pallas_call", reference=lambda x: x + 1.0)
def mosaic_gpu_pallas_call():
    """A pallas_call carrying Mosaic GPU compiler params: JAX 0.12 cannot lower it for a GPU
    (lowering and check say what to write instead); the interpreters still run it."""

    def fn(x):
        spec = pl.BlockSpec((128,), lambda i: (i,))
        return pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[spec], out_specs=spec,
                              compiler_params=plgpu.CompilerParams())(x)

    return fn, (rand((256,)),)

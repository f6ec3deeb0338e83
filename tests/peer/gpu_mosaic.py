"""Peer kernels for Mosaic GPU, written from JAX's own Mosaic GPU Pallas tests
(`mosaic_gpu_test.py`: the staged examples, TMA copies and barriers, emit_pipeline,
warpgroup MMA, several warpgroups, semaphores).

JAX 0.12 lowers Mosaic GPU only through `plgpu.kernel`, so each kernel is written that way
(the tests' `pallas_call` + `plgpu.BlockSpec` forms become explicit TMA copies). On a CPU they
run under the Mosaic GPU interpreter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from registry import peer

MGPU_TESTS = "mosaic_gpu_test.py"
F16_TILE = jax.ShapeDtypeStruct((128, 128), jnp.float16)


def _f16_iota() -> jax.Array:
    """The examples' input: 0, 1, 2, ... in float16 (large values round; both sides alike)."""
    return jnp.arange(128 * 128, dtype=jnp.float16).reshape(128, 128)


def _swizzled(swizzle: int, dtype) -> tuple[plgpu.Transform, ...]:
    """The tiling + swizzle JAX's tests use for SMEM that TMA and wgmma read."""
    swizzle_elems = 8 * swizzle // (jnp.dtype(dtype).itemsize * 8)
    # JAX's stubs leave `transform_array` abstract on these concrete dataclasses.
    tiling = plgpu.TilingTransform((8, swizzle_elems))  # type: ignore[abstract]
    return tiling, plgpu.SwizzleTransform(swizzle)  # type: ignore[abstract]


# --- the staged examples ----------------------------------------------------------------


def _sum(lhs, rhs):
    return lhs + rhs


def _product(lhs, rhs):
    return lhs @ rhs


def _add_body(l_ref, r_ref, o_ref):
    o_ref[...] = l_ref[...] + r_ref[...]


@peer("mosaic-gpu", f"{MGPU_TESTS}::ExamplesTest::test_stage0", backend="mosaic-gpu",
      reference=_sum)
def mgpu_add_whole():
    """One block adds two (128, 128) float16 arrays straight from GMEM."""
    return plgpu.kernel(_add_body, out_type=F16_TILE), (_f16_iota(), _f16_iota())


def _add_rows_body(l_ref, r_ref, o_ref):
    rows = pl.ds(lax.axis_index("rows") * 64, 64)
    o_ref[rows] = l_ref[rows] + r_ref[rows]


@peer("mosaic-gpu", f"{MGPU_TESTS}::ExamplesTest::test_stage1", backend="mosaic-gpu",
      reference=_sum)
def mgpu_add_rows():
    """Two blocks (grid name "rows"), each adding its 64 rows."""
    fn = plgpu.kernel(_add_rows_body, out_type=F16_TILE, grid=(2,), grid_names=("rows",))
    return fn, (_f16_iota(), _f16_iota())


def _tma_add_body(l_ref, r_ref, o_ref, l_smem, r_smem, o_smem, barrier):
    rows = pl.ds(lax.axis_index("rows") * 64, 64)
    plgpu.copy_gmem_to_smem(l_ref.at[rows], l_smem, barrier)
    plgpu.copy_gmem_to_smem(r_ref.at[rows], r_smem, barrier)
    plgpu.barrier_wait(barrier)  # two arrivals: both copies landed
    o_smem[...] = l_smem[...] + r_smem[...]
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_smem, o_ref.at[rows])
    plgpu.wait_smem_to_gmem(0)


@peer("mosaic-gpu", f"{MGPU_TESTS}::ExamplesTest::test_stage3", backend="mosaic-gpu",
      reference=_sum)
def mgpu_tma_add():
    """Two blocks, each TMA-copying its rows of both operands into SMEM under one barrier
    expecting two arrivals, adding in SMEM and TMA-copying the sum back."""
    smem = plgpu.SMEM((64, 128), jnp.float16)
    fn = plgpu.kernel(_tma_add_body, out_type=F16_TILE, grid=(2,), grid_names=("rows",),
                      scratch_types=[smem, smem, smem, plgpu.Barrier(num_arrivals=2)])
    return fn, (_f16_iota(), _f16_iota())


def _pipeline_add_body(l_ref, r_ref, o_ref, *, transforms):
    def compute(_, l_smem, r_smem, o_smem):
        o_smem[...] = l_smem[...] + r_smem[...]

    row = lax.axis_index("rows")
    block = plgpu.BlockSpec((64, 32), lambda c: (row, c), transforms=transforms)
    plgpu.emit_pipeline(compute, grid=(l_ref.shape[1] // 32,), in_specs=[block] * 2,
                        out_specs=[block])(l_ref, r_ref, o_ref)


# JAX's Mosaic GPU interpreter runs no predicated SMEM->GMEM copy (emit_pipeline's output
# write-back: "predicate not supported"); gpu-interpret runs them by pallaslab's rule.
@peer("mosaic-gpu", f"{MGPU_TESTS}::ExamplesTest::test_stage4", backend="mosaic-gpu",
      reference=_sum)
def mgpu_pipeline_add():
    """Two blocks, each streaming (64, 32) tiles of its rows through `emit_pipeline`
    (input and output BlockSpecs)."""

    def body(l_ref, r_ref, o_ref):
        _pipeline_add_body(l_ref, r_ref, o_ref, transforms=())

    fn = plgpu.kernel(body, out_type=F16_TILE, grid=(2,), grid_names=("rows",))
    return fn, (_f16_iota(), _f16_iota())


@peer("mosaic-gpu", f"{MGPU_TESTS}::ExamplesTest::test_stage5", backend="mosaic-gpu",
      reference=_sum)
def mgpu_pipeline_swizzled():
    """`mgpu_pipeline_add` with its SMEM tiles tiled (8, 32) and swizzled 64 bytes."""

    def body(l_ref, r_ref, o_ref):
        _pipeline_add_body(l_ref, r_ref, o_ref, transforms=_swizzled(64, jnp.float16))

    fn = plgpu.kernel(body, out_type=F16_TILE, grid=(2,), grid_names=("rows",))
    return fn, (_f16_iota(), _f16_iota())


# --- TMA copies and barriers ------------------------------------------------------------


def _tma_loop_body(x_gmem, o_ref, x_smem, barrier):
    @pl.loop(0, o_ref.shape[0] // x_smem.shape[0])
    def _(i):
        window = pl.ds(i * 128, 128)
        plgpu.copy_gmem_to_smem(x_gmem.at[window], x_smem, barrier,
                                oob_mode=plgpu.OOBFillMode.PROMISE_IN_BOUNDS)
        plgpu.barrier_wait(barrier)  # the barrier's phase flips each time round
        o_ref[window] = x_smem[...] + 1


@peer("mosaic-gpu", f"{MGPU_TESTS}::PallasCallTest::test_copy_gmem_to_smem_dynamic_slice",
      backend="mosaic-gpu", reference=lambda x: x + 1.0)
def mgpu_tma_loop():
    """A loop reusing one (128,) SMEM buffer and one barrier to TMA-copy two windows at
    dynamic offsets, storing each plus one."""
    fn = plgpu.kernel(_tma_loop_body, out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                      scratch_types=[plgpu.SMEM((128,), jnp.float32), plgpu.Barrier()])
    return fn, (jnp.arange(256, dtype=jnp.float32),)


def _wgmma_body(a_gmem, b_gmem, o_ref, a_smem, b_smem, barrier):
    plgpu.copy_gmem_to_smem(a_gmem, a_smem, barrier)
    plgpu.copy_gmem_to_smem(b_gmem, b_smem, barrier)
    plgpu.barrier_wait(barrier)

    def multiply(acc_ref):
        plgpu.wgmma(acc_ref, a_smem, b_smem)
        return acc_ref[...]  # reading the accumulator waits for the MMA

    o_ref[...] = pl.run_scoped(multiply, plgpu.ACC((64, 192), jnp.float32))


def _wgmma_reference(a, b):
    return jnp.matmul(a, b, preferred_element_type=jnp.float32)


@peer("mosaic-gpu", f"{MGPU_TESTS}::PallasCallSm90ATest::test_wgmma[float16]",
      backend="mosaic-gpu", reference=_wgmma_reference)
def mgpu_wgmma():
    """A (64, 128) @ (128, 192) float16 warpgroup MMA: both operands TMA-copied into tiled,
    128-byte-swizzled SMEM, accumulated in a float32 `plgpu.ACC`."""
    transforms = _swizzled(128, jnp.float16)
    fn = plgpu.kernel(_wgmma_body, out_type=jax.ShapeDtypeStruct((64, 192), jnp.float32),
                      scratch_types=[plgpu.SMEM((64, 128), jnp.float16, transforms=transforms),
                                     plgpu.SMEM((128, 192), jnp.float16, transforms=transforms),
                                     plgpu.Barrier(num_arrivals=2)])
    a = jax.random.uniform(jax.random.key(42), (64, 128), dtype=jnp.float16)
    b = jax.random.uniform(jax.random.key(43), (128, 192), dtype=jnp.float16)
    return fn, (a, b)


def _pipelined_wgmma_body(l_ref, r_ref, o_ref):
    def compute(indices, l_smem, r_smem, o_smem):
        def multiply(acc_ref):
            plgpu.wgmma(acc_ref, l_smem, r_smem)
            return acc_ref[...]

        acc = pl.run_scoped(multiply, plgpu.ACC((64, 64), jnp.float16))

        def store():
            o_smem[...] = acc

        def accumulate():
            o_smem[...] += acc

        (k,) = indices
        lax.cond(k == 0, store, accumulate)

    m, n = lax.axis_index("m"), lax.axis_index("n")
    transforms = _swizzled(64, jnp.float16)
    plgpu.emit_pipeline(
        compute, grid=(l_ref.shape[1] // 32,),
        in_specs=[plgpu.BlockSpec((64, 32), lambda k: (m, k), transforms=transforms),
                  plgpu.BlockSpec((32, 64), lambda k: (k, n), transforms=transforms)],
        out_specs=[plgpu.BlockSpec((64, 64), lambda k: (m, n), transforms=transforms)],
    )(l_ref, r_ref, o_ref)


@peer("mosaic-gpu", f"{MGPU_TESTS}::ExamplesSm90ATest::test_stage6", backend="mosaic-gpu",
      reference=_product)
def mgpu_pipelined_wgmma():
    """A (128, 128) float16 matmul over a (2, 2) grid of 64x64 output blocks, each
    pipelining 32-deep K slices through swizzled SMEM into wgmma, accumulating in SMEM."""
    x = jax.random.uniform(jax.random.key(42), (128, 128), dtype=jnp.float16)
    fn = plgpu.kernel(_pipelined_wgmma_body, out_type=F16_TILE, grid=(2, 2),
                      grid_names=("m", "n"))
    return fn, (x, x)


# --- several warpgroups -----------------------------------------------------------------


def _cross_wg_barrier_body(o_ref, barrier):
    plgpu.barrier_arrive(barrier)
    plgpu.barrier_wait(barrier)  # both warpgroups arrived
    wg = lax.axis_index("wg")
    o_ref[wg] = jnp.broadcast_to(wg, (128,))


@peer("mosaic-gpu", f"{MGPU_TESTS}::CoreMapTest::test_cross_wg_barrier",
      backend="mosaic-gpu",
      reference=lambda: jnp.asarray(np.repeat([0, 1], 128).reshape(2, 128), jnp.int32))
def mgpu_cross_wg_barrier():
    """Two warpgroups (each one logical thread) meet at a barrier expecting two arrivals,
    then each fills its own row with its index."""
    fn = plgpu.kernel(_cross_wg_barrier_body, out_type=jax.ShapeDtypeStruct((2, 128), jnp.int32),
                      scratch_types=[plgpu.Barrier(num_arrivals=2)], num_threads=2,
                      thread_name="wg")
    return fn, ()


def _warp_ids_body(out_ref):
    wg = lax.axis_index("wg")

    @plgpu.warp_map
    def _(warp):
        out_ref[wg * 4 + warp] = warp


@peer("mosaic-gpu",
      f"{MGPU_TESTS}::PallasCallWarpPrimitiveSemanticsTest::test_axis_index_multi_warpgroup",
      backend="mosaic-gpu",
      reference=lambda: jnp.tile(jnp.arange(4, dtype=jnp.int32), 2))
def mgpu_warp_ids():
    """Two warpgroups of four warps each (`warp_map`); every warp stores its index."""
    fn = plgpu.kernel(_warp_ids_body, out_type=jax.ShapeDtypeStruct((8,), jnp.int32),
                      num_threads=2, thread_name="wg")
    return fn, ()


def _wg_grid_body(o_ref):
    xy = lax.axis_index(("x", "y"))
    yx = lax.axis_index(("y", "x"))
    wg = lax.axis_index("wg")
    o_ref[xy, wg] = jnp.broadcast_to(yx * lax.axis_size("wg") + wg, (128,))


def _wg_grid_reference():
    return jnp.asarray(np.repeat([0, 1, 4, 5, 2, 3, 6, 7], 128).reshape(4, 2, 128), jnp.int32)


@peer("mosaic-gpu", f"{MGPU_TESTS}::CoreMapTest::test_multiple_wg_with_grid",
      backend="mosaic-gpu", reference=_wg_grid_reference)
def mgpu_warpgroups_in_grid():
    """A (2, 2) grid of blocks with two warpgroups each; every warpgroup fills its row with
    its position in the grid taken in the other axis order."""
    fn = plgpu.kernel(_wg_grid_body, out_type=jax.ShapeDtypeStruct((4, 2, 128), jnp.int32),
                      grid=(2, 2), grid_names=("x", "y"), num_threads=2, thread_name="wg")
    return fn, ()


# --- semaphores -------------------------------------------------------------------------


def _global_semaphore_body(out_ref):
    sem = pl.get_global(plgpu.SemaphoreType.REGULAR)
    block = lax.axis_index("x")

    @pl.when(block == 0)
    def _():
        pl.semaphore_signal(sem)

    @pl.when(block == 1)
    def _():
        pl.semaphore_wait(sem)
        out_ref[...] = jnp.ones_like(out_ref)


@peer("mosaic-gpu", f"{MGPU_TESTS}::SemaphoreTest::test_global_semaphore",
      backend="mosaic-gpu", reference=lambda: jnp.ones((128,), jnp.float32))
def mgpu_global_semaphore():
    """Ten blocks share one global semaphore: block 0 signals it, block 1 waits on it and
    then writes the output."""
    fn = plgpu.kernel(_global_semaphore_body, out_type=jax.ShapeDtypeStruct((128,), jnp.float32),
                      grid=(10,), grid_names=("x",))
    return fn, ()

"""Deliberately wrong GPU kernels, each a small mutation of a peer kernel from JAX's own GPU
Pallas tests that real hardware would get wrong. They are not registered as peers (the corpus
expects peers to be right); `WRONG` maps each case to what pallaslab must say about it, and
each `<case>_reference` is the value the correct kernel computes, for `compare --reference`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import triton as plt

WRONG: dict[str, str] = {
    # JAX's GPU interpreter lands the copy at once (no race without detect_races=True): a
    # static walk of the body in program order finds both.
    "mgpu_read_before_tma_wait":
        "check or compare fails (exit 1) with unwaited-copy: x_smem is read before any wait on "
        "the barrier its TMA copy arrives on (on hardware the read races the copy)",
    "mgpu_copy_out_without_commit":
        "check or compare fails (exit 1) with uncommitted-smem: o_smem is written by the "
        "threads and then TMA-copied to GMEM with no commit_smem between (the copy may read "
        "stale SMEM)",
    # Caught today.
    "triton_racy_accumulate":
        "check fails with parallel-write-conflict on outputs, and compare exits 1 saying so: "
        "every program does a plain read-modify-write of the one output element (no atomic)",
    "triton_unmasked_tail_load":
        "check fails with out-of-bounds-access on args[0], and compare exits 1 saying so: the "
        "last program loads elements 129..159 of a 129-element input with no mask",
}


def _tma_no_wait_body(x_gmem, o_gmem, x_smem, barrier):
    plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
    o_gmem[...] = x_smem[...] + 1.0  # wrong: no plgpu.barrier_wait(barrier) first


def mgpu_read_before_tma_wait():
    """`mosaic_gpu_test.py::test_copy_gmem_to_smem` with its `barrier_wait` left out."""
    fn = plgpu.kernel(_tma_no_wait_body, out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                      scratch_types=[plgpu.SMEM((256,), jnp.float32), plgpu.Barrier()])
    return fn, (jnp.arange(256, dtype=jnp.float32),)


def mgpu_read_before_tma_wait_reference(x):
    return x + 1.0


def _no_commit_body(x_gmem, o_gmem, o_smem):
    o_smem[...] = x_gmem[...] * 2.0
    # wrong: no plgpu.commit_smem() before the TMA engine reads o_smem
    plgpu.copy_smem_to_gmem(o_smem, o_gmem)
    plgpu.wait_smem_to_gmem(0)


def mgpu_copy_out_without_commit():
    """`mosaic_gpu_test.py::ExamplesTest::test_stage3`'s store path with `commit_smem` left
    out."""
    fn = plgpu.kernel(_no_commit_body, out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                      scratch_types=[plgpu.SMEM((256,), jnp.float32)])
    return fn, (jnp.arange(256, dtype=jnp.float32),)


def mgpu_copy_out_without_commit_reference(x):
    return x * 2.0


def _racy_accumulate_kernel(x_ref, init_ref, o_ref):
    del init_ref  # aliased with o_ref: zero
    o_ref[...] += x_ref[pl.program_id(0)]  # wrong: not plt.atomic_add


def triton_racy_accumulate():
    """`triton_pallas_test.py::test_scalar_atomic[add_f32]` with the atomic replaced by a
    plain `+=`."""

    def fn(x, init):
        return pl.pallas_call(_racy_accumulate_kernel,
                              out_shape=jax.ShapeDtypeStruct((1,), x.dtype),
                              grid=(x.shape[0],), input_output_aliases={1: 0},
                              compiler_params=plt.CompilerParams())(x, init)

    return fn, (jnp.arange(1.0, 5.0, dtype=jnp.float32), jnp.zeros((1,), jnp.float32))


def triton_racy_accumulate_reference(x, init):
    return jnp.sum(x, keepdims=True)


def _unmasked_tail_kernel(x_ref, o_ref, *, block: int):
    idx = pl.program_id(0) * block + jnp.arange(block, dtype=jnp.int32)
    mask = idx < x_ref.shape[0]
    x = plt.load(x_ref.at[idx])  # wrong: no mask on the load
    plt.store(o_ref.at[idx], x + 1.0, mask=mask)


def triton_unmasked_tail_load():
    """`triton_pallas_test.py::test_masked_load_store` with the load's mask left out."""
    size, block = 129, 32

    def fn(x):
        kernel = functools.partial(_unmasked_tail_kernel, block=block)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((size,), x.dtype),
                              grid=(pl.cdiv(size, block),),
                              compiler_params=plt.CompilerParams())(x)

    return fn, (jnp.arange(129, dtype=jnp.float32),)


def triton_unmasked_tail_load_reference(x):
    return x + 1.0

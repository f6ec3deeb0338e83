"""Single-bug GPU kernels: Triton-style whole-array kernels (run under the HLO interpreter)
and a Mosaic GPU kernel (run under JAX's GPU interpreter), and their originals."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import triton as plt
from mutant_registry import line_of, mutant, original

B = 16
INTERPRET = ("interpret", "reference")


def plus_one(x):
    return x + 1.0


def _x(shape=(48, 40)):
    return jax.random.normal(jax.random.key(0), shape, jnp.float32)


def _tile_kernel(x_ref, o_ref, *, rows_axis=0, transposed_mask=False):
    i, j = pl.program_id(rows_axis), pl.program_id(1)
    n, m = x_ref.shape
    r = pl.program_id(0) * B + jnp.arange(B)[:, None]
    c = j * B + jnp.arange(B)[None, :]
    rr = i * B + jnp.arange(B)[:, None]
    load_mask = ((rr < m) & (c < n)) if transposed_mask else ((rr < n) & (c < m))
    x = plt.load(x_ref.at[pl.ds(i * B, B), pl.ds(j * B, B)], mask=load_mask, other=0.0)
    plt.store(o_ref.at[pl.ds(pl.program_id(0) * B, B), pl.ds(j * B, B)], x + 1.0,
              mask=(r < n) & (c < m))


def _tiles(x, kernel=_tile_kernel):
    n, m = x.shape
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(n, B), pl.cdiv(m, B)),
                          compiler_params=plt.CompilerParams())(x)


@original(plus_one, INTERPRET)
def triton_tiles_ok():
    return _tiles, (_x(),)


@mutant("triton_tiles_ok", "the load's row offset takes the column program id", plus_one,
        kind="line", words=(f"all last written by {line_of(__file__, 'plt.store(o_ref')}",),
        executors=INTERPRET)
def triton_wrong_program_id_axis():
    return functools.partial(_tiles, kernel=functools.partial(_tile_kernel, rows_axis=1)), \
        (_x((48, 48)),)


@mutant("triton_tiles_ok", "the load's mask is transposed", plus_one,
        kind="line", words=(f"all last written by {line_of(__file__, 'plt.store(o_ref')}",),
        executors=INTERPRET)
def triton_mask_transposed():
    return functools.partial(
        _tiles, kernel=functools.partial(_tile_kernel, transposed_mask=True)), (_x(),)


def _tma_body(x_gmem, o_gmem, x_smem, barrier, *, wait=True):
    plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
    if wait:
        plgpu.barrier_wait(barrier)
    o_gmem[...] = x_smem[...] + 1.0


def _tma(x, body=_tma_body):
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                        scratch_types=[plgpu.SMEM((256,), jnp.float32), plgpu.Barrier()])(x)


@original(plus_one, ("gpu-interpret", "reference"))
def mgpu_tma_ok():
    return _tma, (jnp.arange(256, dtype=jnp.float32),)


@mutant("mgpu_tma_ok", "the barrier wait after the TMA copy is missing", plus_one,
        finding="unwaited-copy", executors=("gpu-interpret", "reference"))
def mgpu_missing_barrier_wait():
    return functools.partial(_tma, body=functools.partial(_tma_body, wait=False)), \
        (jnp.arange(256, dtype=jnp.float32),)


def _mgpu_add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _mgpu_blocks(x, *, x_map=lambda i: (i,)):
    return pl.pallas_call(
        _mgpu_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
        in_specs=[pl.BlockSpec((128,), x_map)], out_specs=pl.BlockSpec((128,), lambda i: (i,)),
        compiler_params=plgpu.CompilerParams())(x)


@original(plus_one, INTERPRET)
def mgpu_blocks_ok():
    return _mgpu_blocks, (_x((512,)),)


@mutant("mgpu_blocks_ok", "x's index map walks the blocks backwards", plus_one,
        kind="index-map", words=("args[0]", "index map `lambda i: (3 - i,)`"),
        operand="args[0]", executors=INTERPRET)
def mgpu_blocks_reversed_map():
    return functools.partial(_mgpu_blocks, x_map=lambda i: (3 - i,)), (_x((512,)),)

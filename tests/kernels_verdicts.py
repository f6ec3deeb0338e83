"""Kernels behind the static verdicts of issue 24 (part 2): each shows a class of false verdict
(`test_verdicts_static.py`). Cases for the CLI: `tests/kernels_verdicts.py:NAME`."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt

F32 = jnp.float32
TRITON = plt.CompilerParams(num_warps=4)


def _accumulate_rows(x_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]


def _column_sums(revisit):
    """Grid (2, 4), rows outer: output block j is visited at steps (0, j) and (1, j), which are
    not consecutive."""

    def fn(x):
        return pl.pallas_call(
            _accumulate_rows, grid=(2, 4),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (0, j),
                                   pipeline_mode=pl.Buffered(1, revisit=revisit)),
            out_shape=jax.ShapeDtypeStruct((8, 512), F32),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",) * 2),
        )(x)

    return fn, (jax.ShapeDtypeStruct((16, 512), F32),)


def revisit_any():
    return _column_sums(pl.RevisitMode.ANY)


def revisit_immediate():
    return _column_sums(pl.RevisitMode.IMMEDIATE)


def _partial_sums(x_ref, sum_ref, max_ref):
    plt.atomic_add(sum_ref, pl.ds(0, 8), x_ref[...])
    plt.atomic_max(max_ref, pl.ds(0, 8), x_ref[...])


def _plain_sums(x_ref, sum_ref, max_ref):
    sum_ref[...] += x_ref[...]
    max_ref[...] = jnp.maximum(max_ref[...], x_ref[...])


def _shared_block(body):
    """Every program combines its (8,) block of x into the one (8,) block of each output."""

    def fn(x):
        out = jax.ShapeDtypeStruct((8,), F32)
        return pl.pallas_call(
            body, grid=(4,), in_specs=[pl.BlockSpec((8,), lambda i: (i,))],
            out_specs=[pl.BlockSpec((8,), lambda i: (0,))] * 2, out_shape=[out, out],
            compiler_params=TRITON)(x)

    return fn, (jax.ShapeDtypeStruct((32,), F32),)


def atomic_shared_block():
    return _shared_block(_partial_sums)


def plain_shared_block():
    return _shared_block(_plain_sums)


def _locked_sum(x_ref, lock_in, total_in, lock_ref, total_ref):
    del lock_in, total_in  # aliased with the outputs: their initial values

    def spin(_):
        return plt.atomic_cas(lock_ref, 0, 1)  # 0: was free, now ours

    jax.lax.while_loop(lambda held: held != 0, spin, jnp.int32(1))
    plt.atomic_add(total_ref, pl.ds(0, 8), x_ref[...])
    plt.atomic_xchg(lock_ref, (), 0)


def spin_lock():
    """A lock built from atomic_cas / atomic_xchg on a rank-0 int32 output every program
    shares."""

    def fn(x, lock, total):
        return pl.pallas_call(
            _locked_sum, grid=(4,),
            in_specs=[pl.BlockSpec((8,), lambda i: (i,)), pl.BlockSpec((), lambda i: ()),
                      pl.BlockSpec((8,), lambda i: (0,))],
            out_specs=[pl.BlockSpec((), lambda i: ()), pl.BlockSpec((8,), lambda i: (0,))],
            out_shape=[jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((8,), F32)],
            input_output_aliases={1: 0, 2: 1}, compiler_params=TRITON)(x, lock, total)

    return fn, (jax.ShapeDtypeStruct((32,), F32), jnp.zeros((), jnp.int32),
                jnp.zeros((8,), F32))


def _forgets_second(x_ref, y_ref, o_ref, forgotten_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def unwritten_output():
    """Two outputs; the body writes only the first."""

    def fn(x, y):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(_forgets_second, grid=(2,), in_specs=[spec, spec],
                              out_specs=[spec, spec], out_shape=[out, out])(x, y)

    a = jax.ShapeDtypeStruct((16, 128), F32)
    return fn, (a, a)


def _copy_by_dma(x_hbm, o_hbm):
    pltpu.sync_copy(x_hbm, o_hbm)


def dma_written_output():
    """The output stays in HBM and is written by a DMA, never by a store."""
    any_space = pl.BlockSpec(memory_space=pl.ANY)

    def fn(x):
        return pl.pallas_call(_copy_by_dma, in_specs=[any_space], out_specs=any_space,
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    return fn, (jax.ShapeDtypeStruct((16, 128), F32),)


def _doubled_by_pipeline(x_hbm, o_hbm):
    def inner(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    pltpu.emit_pipeline(inner, grid=(2,), in_specs=[spec], out_specs=spec)(x_hbm, o_hbm)


def pipeline_written_output():
    """The output is written by a nested pipeline's write-backs."""
    any_space = pl.BlockSpec(memory_space=pl.ANY)

    def fn(x):
        return pl.pallas_call(_doubled_by_pipeline, in_specs=[any_space], out_specs=any_space,
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    return fn, (jax.ShapeDtypeStruct((16, 128), F32),)


def _adds_to_first(x_ref, acc_ref, o_ref):
    del acc_ref, o_ref  # o_ref is acc's buffer: it keeps acc's values


def aliased_unwritten_output():
    """An output aliased to an input and not written keeps that input's values: no finding."""

    def fn(x, acc):
        return pl.pallas_call(_adds_to_first, out_shape=jax.ShapeDtypeStruct(acc.shape, F32),
                              input_output_aliases={1: 0})(x, acc)

    return fn, (jnp.ones((8, 128), F32), jnp.zeros((8, 128), F32))


def _add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def interpreted_narrow_blocks():
    """A learner's 2-D add in (8, 32) f32 blocks, run with interpret=True: fine in the
    interpreter, misaligned for a TPU."""

    def fn(x, y):
        spec = pl.BlockSpec((8, 32), lambda i, j: (i, j))
        return pl.pallas_call(_add, grid=(2, 4), in_specs=[spec, spec], out_specs=spec,
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=True)(x, y)

    a = jax.ShapeDtypeStruct((16, 128), F32)
    return fn, (a, a)


def _total(x_ref, o_ref):
    o_ref[...] = jnp.sum(x_ref[...])


def scalar_output():
    """A rank-0 output in VMEM (the default memory space)."""

    def fn(x):
        return pl.pallas_call(_total, out_shape=jax.ShapeDtypeStruct((), F32))(x)

    return fn, (jax.ShapeDtypeStruct((8, 128), F32),)


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def mosaic_gpu_params_pallas_call():
    """A pallas_call carrying Mosaic GPU compiler params: JAX 0.12 cannot lower it on a GPU."""

    def fn(x):
        spec = pl.BlockSpec((128,), lambda i: (i,))
        return pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[spec], out_specs=spec,
                              compiler_params=plgpu.CompilerParams())(x)

    return fn, (jax.ShapeDtypeStruct((256,), F32),)


def _matmul_k_loop(x_ref, y_ref, o_ref, *, bk: int):
    def step(k, acc):
        x = x_ref[:, pl.ds(k * bk, bk)]
        y = y_ref[pl.ds(k * bk, bk), :]
        return acc + jnp.dot(x, y, preferred_element_type=F32)

    acc = jnp.zeros(o_ref.shape, F32)
    o_ref[...] = jax.lax.fori_loop(0, x_ref.shape[1] // bk, step, acc)


def matmul_k_blocks_of_32():
    """512^3 f32 matmul in (128, 128) output blocks, the K loop slicing 32 lanes at a time:
    Mosaic cannot prove the slices' lane offsets are multiples of 128 (libtpu E2003)."""

    def fn(x, y):
        m, k = x.shape
        n = y.shape[1]
        return pl.pallas_call(
            functools.partial(_matmul_k_loop, bk=32), grid=(m // 128, n // 128),
            in_specs=[pl.BlockSpec((128, k), lambda i, j: (i, 0)),
                      pl.BlockSpec((k, 128), lambda i, j: (0, j))],
            out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            out_shape=jax.ShapeDtypeStruct((m, n), F32))(x, y)

    a = jax.ShapeDtypeStruct((512, 512), F32)
    return fn, (a, a)

"""Peers from JAX's tpu_pallas_test.py written with BlockSpecs for TPU (Mosaic compiler
params, run on the TPU interpreter)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from registry import peer

ORIGIN = "tpu_pallas_test.py::"


def _f32(shape, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


# --- TPUPipelineModeTest.test_two_input_vadd (pl.Buffered buffer counts) ------------------


def _vadd_body(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def _two_input_vadd(x, y):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(1))
    return pl.pallas_call(
        _vadd_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 8,),
        in_specs=[spec, pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))(x, y)


@peer("blockspec", ORIGIN + "TPUPipelineModeTest::test_two_input_vadd", backend="tpu",
      reference=lambda x, y: x + y)
def two_input_vadd_buffered():
    return _two_input_vadd, (_f32((32, 128)), _f32((32, 128), 1))


# --- TPUPipelineModeRevisitTest.test_block_reduction_with_non_immediate_revisit ------------


def _row_block_sum_body(x_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]


def _block_reduction(x):
    # out block i accumulates x's column blocks j: revisited on consecutive steps only
    return pl.pallas_call(
        _row_block_sum_body, out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), x.dtype),
        grid=(x.shape[0] // 8, x.shape[1] // 128),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary")))(x)


def _block_reduction_reference(x):
    return x.reshape(x.shape[0], -1, 128).sum(axis=1)


@peer("blockspec", ORIGIN + "TPUPipelineModeRevisitTest::"
      "test_block_reduction_with_non_immediate_revisit", backend="tpu",
      reference=_block_reduction_reference)
def block_reduction_accumulate():
    return _block_reduction, (_f32((16, 512)),)


# --- PallasCallTest.test_vmem_limit: a block too big for the default scoped VMEM ----------


def _copy_body(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _over_scoped_vmem(x):
    # 2 buffers x (in + out) x 8 MiB blocks = 32 MiB > v5e's 16 MiB default scoped limit
    return pl.pallas_call(
        _copy_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 2048,),
        in_specs=[pl.BlockSpec((2048, 1024), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((2048, 1024), lambda i: (i, 0)))(x)


@peer("blockspec", ORIGIN + "PallasCallTest::test_vmem_limit", backend="tpu", reference=None,
      compiles=False, rejected_by="vmem-oom", interpretable=False,
      why_not="the test only asserts the compiler's scoped-VMEM error")
def vmem_limit_exceeded():
    return _over_scoped_vmem, (jax.ShapeDtypeStruct((4096, 1024), jnp.float32),)

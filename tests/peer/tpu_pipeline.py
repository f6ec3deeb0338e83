"""Peers from tpu_pallas_pipeline_test.py: `pltpu.emit_pipeline` inside a pallas_call whose
operands stay in HBM (memory space ANY)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from registry import peer

ORIGIN = "tpu_pallas_pipeline_test.py::"
ANY = pl.BlockSpec(memory_space=pl.ANY)


def _f32(shape, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def _outer(body, *xs, out_shape, scratch=()):
    return pl.pallas_call(body, out_shape=out_shape, in_specs=[ANY] * len(xs), out_specs=ANY,
                          scratch_shapes=list(scratch))(*xs)


# --- PallasCallPipelineTest.test_pipeline_matmul -------------------------------------------


def _matmul_step(x_ref, y_ref, z_ref):
    @pl.when(pl.program_id(2) == 0)
    def _zero():
        z_ref[...] = jnp.zeros_like(z_ref)

    z_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


def _pipelined_matmul_body(x_hbm, y_hbm, z_hbm):
    pltpu.emit_pipeline(
        _matmul_step, grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((128, 128), lambda i, j, k: (i, k)),
                  pl.BlockSpec((128, 128), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((128, 128), lambda i, j, k: (i, j)))(x_hbm, y_hbm, z_hbm)


@peer("emit_pipeline", ORIGIN + "PallasCallPipelineTest::test_pipeline_matmul", backend="tpu",
      reference=lambda x, y: jnp.dot(x, y, precision="highest"))
def pipeline_matmul():
    def fn(x, y):
        return _outer(_pipelined_matmul_body, x, y,
                      out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32))
    return fn, (_f32((256, 256)), _f32((256, 256), 1))


# --- PallasCallPipelineTest.test_pipeline_without_inputs ----------------------------------


def _fill_step(o_ref):
    o_ref[...] = jnp.full(o_ref.shape, 7.0, o_ref.dtype)


def _no_inputs_body(o_hbm):
    pltpu.emit_pipeline(_fill_step, grid=(4,), in_specs=[],
                        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(o_hbm)


@peer("emit_pipeline", ORIGIN + "PallasCallPipelineTest::test_pipeline_without_inputs",
      backend="tpu", reference=lambda x: jnp.full((32, 128), 7.0, jnp.float32))
def pipeline_without_inputs():
    def fn(x):
        del x
        return pl.pallas_call(_no_inputs_body, out_shape=jax.ShapeDtypeStruct((32, 128),
                                                                              jnp.float32),
                              out_specs=ANY)()
    return fn, (jnp.zeros((1,), jnp.float32),)


# --- PallasCallMultipleBufferedPipelineTest.test_block_gather ------------------------------


def _copy_step(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _gather_body(idx_ref, x_hbm, o_hbm):
    # inner block i reads x's block idx[i]: a gather through an index map reading SMEM
    pltpu.emit_pipeline(
        _copy_step, grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (idx_ref[i], 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x_hbm, o_hbm)


@peer("emit_pipeline", ORIGIN + "PallasCallMultipleBufferedPipelineTest::test_block_gather",
      backend="tpu", reference=lambda idx, x: x.reshape(4, 8, 128)[idx].reshape(32, 128))
def pipeline_block_gather():
    def fn(idx, x):
        return pl.pallas_call(
            _gather_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), ANY], out_specs=ANY)(idx, x)
    return fn, (jnp.array([2, 0, 3, 1], jnp.int32), _f32((32, 128)))


# --- PallasCallMegacoreTest.test_megacore_mul: a parallel outer grid, inner pipelines ------


def _mul_step(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * y_ref[...]


def _megacore_mul_body(x_hbm, y_hbm, o_hbm):
    i = pl.program_id(0)
    spec = pl.BlockSpec((8, 128), lambda j: (i * 2 + j, 0))
    pltpu.emit_pipeline(_mul_step, grid=(2,), in_specs=[spec, spec],
                        out_specs=spec)(x_hbm, y_hbm, o_hbm)


@peer("emit_pipeline", ORIGIN + "PallasCallMegacoreTest::test_megacore_mul", backend="tpu",
      reference=lambda x, y: x * y)
def megacore_mul():
    def fn(x, y):
        return pl.pallas_call(
            _megacore_mul_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
            in_specs=[ANY, ANY], out_specs=ANY,
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x, y)
    return fn, (_f32((32, 128)), _f32((32, 128), 1))

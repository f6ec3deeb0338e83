"""Peers from JAX's pallas_test.py run as its `*InterpretTest` classes do: `interpret=True`,
no compiler params (the HLO interpreter; `check` judges them for no hardware, `lower`
lowers them for TPU v5e like the TPU test class that shares their body)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from registry import peer

ORIGIN = "pallas_test.py::"


def _f32(shape, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


# --- PallasTest.test_add_one_2d -----------------------------------------------------------


def _add_one_body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _add_one_2d(x):
    return pl.pallas_call(
        _add_one_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=True)(x)


@peer("interpret", ORIGIN + "PallasTest::test_add_one_2d", backend="none",
      reference=lambda x: x + 1.0)
def add_one_2d():
    return _add_one_2d, (_f32((32, 128)),)


# --- PallasCallTest.test_matmul_block_spec ------------------------------------------------


def _matmul_block_body(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


def _matmul_block_spec(x, y, *, bm=128, bn=128):
    m, k = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        _matmul_block_body, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)),
                  pl.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)), interpret=True)(x, y)


@peer("blockspec", ORIGIN + "PallasCallTest::test_matmul_block_spec", backend="none",
      reference=lambda x, y: jnp.dot(x, y, precision="highest"))
def matmul_block_spec():
    return _matmul_block_spec, (_f32((256, 128)), _f32((128, 256), 1))


# --- PallasControlFlowTest.test_fori_loop_accumulates -------------------------------------


def _fori_accumulate_body(x_ref, o_ref):
    def step(i, acc):
        return acc + x_ref[i]

    o_ref[...] = jax.lax.fori_loop(0, x_ref.shape[0], step, jnp.zeros((8, 128), jnp.float32))


def _fori_accumulate(x):
    return pl.pallas_call(_fori_accumulate_body,
                          out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                          interpret=True)(x)


@peer("interpret", ORIGIN + "PallasControlFlowTest::test_fori_loop_accumulates",
      backend="none", reference=lambda x: x.sum(axis=0))
def fori_loop_accumulates():
    return _fori_accumulate, (_f32((4, 8, 128)),)


# --- PallasControlFlowTest.test_cond_simple (program-id dependent branches) ----------------


def _cond_body(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[...] = jax.lax.cond(i % 2 == 0, lambda v: v * 2.0, lambda v: v - 1.0, x_ref[...])


def _cond_by_program(x):
    return pl.pallas_call(
        _cond_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=True)(x)


def _cond_reference(x):
    even = (jnp.arange(x.shape[0]) // 8) % 2 == 0
    return jnp.where(even[:, None], x * 2.0, x - 1.0)


@peer("interpret", ORIGIN + "PallasControlFlowTest::test_cond_simple", backend="none",
      reference=_cond_reference)
def cond_by_program_id():
    return _cond_by_program, (_f32((32, 128)),)


# --- PallasCallInputOutputAliasingTest.test_vector_input_output_aliasing ------------------


def _aliased_body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _aliased(x):
    return pl.pallas_call(
        _aliased_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        input_output_aliases={0: 0}, interpret=True)(x)


@peer("interpret", ORIGIN + "PallasCallInputOutputAliasingTest::"
      "test_vector_input_output_aliasing", backend="none", reference=lambda x: x + 1.0)
def vector_input_output_aliasing():
    return jax.jit(_aliased), (_f32((16, 128)),)


# --- PallasCallElementIndexingTest.test_block_spec_element --------------------------------


def _element_body(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _element_windows(x):
    # Element windows: block i starts at element 8*i, rows [8i, 8i+16) of x (overlapping)
    return pl.pallas_call(
        _element_body, out_shape=jax.ShapeDtypeStruct((3 * 16, 128), x.dtype), grid=(3,),
        in_specs=[pl.BlockSpec((pl.Element(16), 128), lambda i: (8 * i, 0))],
        out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)), interpret=True)(x)


def _element_reference(x):
    return jnp.concatenate([x[8 * i:8 * i + 16] for i in range(3)])


# Mosaic TPU takes element windows only when every dimension is one (the test's TPU class
# skips it): lowered for TPU v5e it is the compiler's `tpu-mixed-element` rejection.
@peer("blockspec", ORIGIN + "PallasCallElementIndexingTest::test_block_spec_element",
      backend="none", reference=_element_reference, compiles=False,
      rejected_by="tpu-mixed-element")
def block_spec_element():
    return _element_windows, (_f32((32, 128)),)


# --- PallasControlFlowTest.test_while_with_dynamic_condition ------------------------------


def _while_body(n_ref, o_ref):
    def cond(carry):
        i, _ = carry
        return i < n_ref[0]

    def body(carry):
        i, acc = carry
        return i + 1, acc + 2.0

    _, acc = jax.lax.while_loop(cond, body, (0, jnp.zeros((8, 128), jnp.float32)))
    o_ref[...] = acc


def _while_dynamic(n):
    return pl.pallas_call(_while_body, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          interpret=True)(n)


@peer("interpret", ORIGIN + "PallasControlFlowTest::test_while_with_dynamic_condition",
      backend="none",
      reference=lambda n: jnp.full((8, 128), 2.0 * n[0], jnp.float32))
def while_with_dynamic_condition():
    return _while_dynamic, (jnp.array([5], jnp.int32),)

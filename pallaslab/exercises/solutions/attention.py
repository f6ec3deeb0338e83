"""Notebook 5's solutions, and the mistakes learners typically make."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_ROWS = pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"))


def _softmax_kernel(x_ref, o_ref, *, axis):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=axis, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=axis, keepdims=True)


def _softmax(x, axis):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(functools.partial(_softmax_kernel, axis=axis), grid=(2,),
                          in_specs=[spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


def softmax_rows(x):
    return _softmax(x, -1)


def softmax_rows_over_columns(x):
    """Wrong: normalises over axis 0, the block's rows."""
    return _softmax(x, 0)


def _lse_kernel(x_ref, o_ref, m_ref, l_ref, *, init):
    k = pl.program_id(1)
    if init:
        @pl.when(k == 0)
        def _():
            m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
            l_ref[...] = jnp.zeros_like(l_ref)
    x = x_ref[...]
    m_new = jnp.maximum(m_ref[...], jnp.max(x, axis=1, keepdims=True))
    l_ref[...] = l_ref[...] * jnp.exp(m_ref[...] - m_new) + jnp.sum(
        jnp.exp(x - m_new), axis=1, keepdims=True)
    m_ref[...] = m_new

    @pl.when(k == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = m_ref[...] + jnp.log(l_ref[...])


def _lse(x, init):
    return pl.pallas_call(
        functools.partial(_lse_kernel, init=init), grid=(2, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, k: (i, k))],
        out_specs=pl.BlockSpec((8, 1), lambda i, k: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], 1), x.dtype),
        scratch_shapes=[pltpu.VMEM((8, 1), jnp.float32), pltpu.VMEM((8, 1), jnp.float32)],
        compiler_params=_ROWS, interpret=True)(x)


def logsumexp_online(x):
    return _lse(x, True)


def logsumexp_online_no_init(x):
    """Wrong: m and l start from whatever the scratch held."""
    return _lse(x, False)


def _attention_kernel(q_ref, k_ref, v_ref, o_ref):
    s = q_ref[...] @ k_ref[...].T
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    o_ref[...] = (p @ v_ref[...]) / jnp.sum(p, axis=-1, keepdims=True)


def _attention(q, k, v, kv_block, kv_map):
    qspec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    kv = pl.BlockSpec((kv_block, 128), kv_map)
    return pl.pallas_call(_attention_kernel, grid=(q.shape[0] // 8,),
                          in_specs=[qspec, kv, kv], out_specs=qspec,
                          out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
                          interpret=True)(q, k, v)


def attention_block(q, k, v):
    return _attention(q, k, v, 32, lambda i: (0, 0))


def attention_block_diagonal_keys(q, k, v):
    """Wrong: k and v follow the query block, so each query sees 8 keys only."""
    return _attention(q, k, v, 8, lambda i: (i, 0))


def _flash_kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, init):
    j = pl.program_id(1)
    if init:
        @pl.when(j == 0)
        def _():
            m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
            l_ref[...] = jnp.zeros_like(l_ref)
            acc_ref[...] = jnp.zeros_like(acc_ref)
    s = q_ref[...] @ k_ref[...].T
    m_new = jnp.maximum(m_ref[...], jnp.max(s, axis=-1, keepdims=True))
    alpha = jnp.exp(m_ref[...] - m_new)
    p = jnp.exp(s - m_new)
    acc_ref[...] = acc_ref[...] * alpha + p @ v_ref[...]
    l_ref[...] = l_ref[...] * alpha + jnp.sum(p, axis=-1, keepdims=True)
    m_ref[...] = m_new

    @pl.when(j == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = acc_ref[...] / l_ref[...]


def _flash(q, k, v, init):
    qspec = pl.BlockSpec((8, 128), lambda i, j: (i, 0))
    kv = pl.BlockSpec((8, 128), lambda i, j: (j, 0))
    return pl.pallas_call(
        functools.partial(_flash_kernel, init=init), grid=(q.shape[0] // 8, k.shape[0] // 8),
        in_specs=[qspec, kv, kv], out_specs=qspec,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        scratch_shapes=[pltpu.VMEM((8, 1), jnp.float32), pltpu.VMEM((8, 1), jnp.float32),
                        pltpu.VMEM((8, 128), jnp.float32)],
        compiler_params=_ROWS, interpret=True)(q, k, v)


def flash_attention(q, k, v):
    return _flash(q, k, v, True)


def flash_attention_no_init(q, k, v):
    """Wrong: the running max, sum and accumulator are never initialised."""
    return _flash(q, k, v, False)


SOLUTIONS = {"softmax-rows": softmax_rows, "logsumexp-online": logsumexp_online,
             "attention-block": attention_block, "flash-attention": flash_attention}
WRONG = {
    "softmax-rows": [(softmax_rows_over_columns, "normalised down its columns")],
    "logsumexp-online": [(logsumexp_online_no_init, "read before its first write")],
    "attention-block": [(attention_block_diagonal_keys, "your k_ref index map")],
    "flash-attention": [(flash_attention_no_init, "read before its first write")],
}

"""Single-bug value bugs inside a kernel body (a mask, a missing rescale): compare must name
the line the bug is on, not only the final store."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mutant_registry import line_of, mutant, original


def rand(shape, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


# -- causal attention scores ----------------------------------------------------------------

def causal_scores_ref(q, k):
    s = q @ k.T
    row, col = jnp.arange(s.shape[0])[:, None], jnp.arange(s.shape[1])[None, :]
    return jnp.where(col <= row, s, 0.0)


def _causal_scores_body(q_ref, k_ref, o_ref, *, strict=False):
    b = o_ref.shape[0]
    s = jnp.dot(q_ref[...], k_ref[...].T, preferred_element_type=jnp.float32)
    row = pl.program_id(0) * b + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
    col = pl.program_id(1) * b + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
    keep = (col < row) if strict else (col <= row)
    o_ref[...] = jnp.where(keep, s, 0.0)


def _causal_scores(q, k, *, strict=False, b=128):
    n, d = q.shape
    return pl.pallas_call(
        functools.partial(_causal_scores_body, strict=strict),
        out_shape=jax.ShapeDtypeStruct((n, n), jnp.float32), grid=(n // b, n // b),
        in_specs=[pl.BlockSpec((b, d), lambda i, j: (i, 0)),
                  pl.BlockSpec((b, d), lambda i, j: (j, 0))],
        out_specs=pl.BlockSpec((b, b), lambda i, j: (i, j)))(q, k)


@original(causal_scores_ref)
def causal_scores_ok():
    return _causal_scores, (rand((256, 32)), rand((256, 32), seed=1))


@mutant("causal_scores_ok", "the causal mask keeps col < row where col <= row is right",
        causal_scores_ref, kind="line", words=(line_of(__file__, "(col < row)"), "mask"))
def causal_scores_strict_mask():
    return functools.partial(_causal_scores, strict=True), (rand((256, 32)),
                                                            rand((256, 32), seed=1))


# -- online softmax -------------------------------------------------------------------------

def softmax_ref(x):
    return jax.nn.softmax(x, axis=-1)


def _online_softmax_body(x_ref, o_ref, m_ref, l_ref, *, rescale=True):
    # Two passes over the column blocks: the running max and sum, then the normalised values.
    k = pl.program_id(2)

    @pl.when((pl.program_id(1) == 0) & (k == 0))
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)

    x = x_ref[...]

    @pl.when(pl.program_id(1) == 0)
    def _accumulate():
        m_old = m_ref[...]
        m_new = jnp.maximum(m_old, x.max(axis=1, keepdims=True))
        p = jnp.exp(x - m_new).sum(axis=1, keepdims=True)
        if rescale:
            l_ref[...] = l_ref[...] * jnp.exp(m_old - m_new) + p
        else:
            l_ref[...] = l_ref[...] + p
        m_ref[...] = m_new

    @pl.when(pl.program_id(1) == 1)
    def _normalise():
        o_ref[...] = jnp.exp(x - m_ref[...]) / l_ref[...]


def _online_softmax(x, *, rescale=True, b=128):
    n, v = x.shape
    return pl.pallas_call(
        functools.partial(_online_softmax_body, rescale=rescale),
        out_shape=jax.ShapeDtypeStruct((n, v), jnp.float32), grid=(n // 8, 2, v // b),
        in_specs=[pl.BlockSpec((8, b), lambda i, p, k: (i, k))],
        out_specs=pl.BlockSpec((8, b), lambda i, p, k: (i, k * p)),
        scratch_shapes=[pltpu.VMEM((8, 1), jnp.float32), pltpu.VMEM((8, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")))(x)


def _softmax_args():
    # Rows 8..15 reach their max in the second column block, the others in the first: only
    # the rows whose max moves are wrong when the sum is not rescaled.
    x = rand((16, 256))
    return (x.at[8:, 200].set(6.0).at[:8, 10].set(6.0),)


@original(softmax_ref)
def online_softmax_ok():
    return _online_softmax, _softmax_args()


@mutant("online_softmax_ok", "the running sum is not rescaled by exp(m_old - m_new) when the "
        "running max moves", softmax_ref, kind="line",
        words=(line_of(__file__, "l_ref[...] + p"), "rescale"))
def online_softmax_no_rescale():
    return functools.partial(_online_softmax, rescale=False), _softmax_args()


# -- vocabulary mask ------------------------------------------------------------------------

VOCAB = 200


def masked_logits_ref(x):
    return jnp.where(jnp.arange(x.shape[1])[None, :] < VOCAB - 8, x * 2.0, 0.0)


def _masked_logits_body(x_ref, o_ref, *, off_by_one=False):
    b = x_ref.shape[1]
    col = pl.program_id(1) * b + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
    valid = (col < VOCAB - 9) if off_by_one else (col < VOCAB - 8)
    o_ref[...] = jnp.where(valid, x_ref[...] * 2.0, 0.0)


def _masked_logits(x, *, off_by_one=False, b=128):
    n, v = x.shape
    return pl.pallas_call(
        functools.partial(_masked_logits_body, off_by_one=off_by_one),
        out_shape=jax.ShapeDtypeStruct((n, v), jnp.float32), grid=(n // 8, pl.cdiv(v, b)),
        in_specs=[pl.BlockSpec((8, b), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((8, b), lambda i, j: (i, j)))(x)


@original(masked_logits_ref)
def masked_logits_ok():
    return _masked_logits, (rand((16, VOCAB)),)


@mutant("masked_logits_ok", "the vocabulary mask drops the last real column (off by one)",
        masked_logits_ref, kind="line",
        words=(line_of(__file__, "(col < VOCAB - 9)"), "mask"))
def masked_logits_off_by_one():
    return functools.partial(_masked_logits, off_by_one=True), (rand((16, VOCAB)),)

"""Triton-backend Pallas kernels of our own: a row softmax, a flash-attention forward pass and a
layer norm with its backward kernels (`pallaslab inspect tests/cases/triton_kernels.py:NAME`).

JAX shipped kernels like these in `jax.experimental.pallas.ops.gpu` until 0.12.1 removed them;
the tests that used them (capture, vectorized runs, findings, the GPU Memory tab) keep the same
shapes of kernel here, written in the same idioms:

- `softmax`: a whole-row kernel with no grid, `jax.vmap`-ed over the leading dimensions, so the
  captured kernel has one program per row and `None` (squeezed) batch block dimensions.
- `mha`: one program per (query block, batch, head), `BlockSpec`s with squeezed batch and head
  dimensions, an online-softmax loop over key blocks (`fori_loop` and `plt.dot`).
- `layer_norm`: a `custom_vjp` whose forward and dx kernels are vmapped whole-row kernels, and
  whose dw/db kernel gives each program its own columns and gathers 2-D tiles with masked
  `plt.load`s of index arrays.

Every launcher takes `interpret=` (JAX's interpreter); the `*_reference` functions are the
pure-JAX results they must match (tests/execute/test_triton_kernels.py checks them).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

EPS = 1e-5


def _rand(shape, dtype=jnp.float32, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


# --- row softmax -----------------------------------------------------------------------------


def _softmax_row_kernel(x_ref, o_ref, *, block: int):
    """One row: x_ref and o_ref hold the whole row, padded up to `block` (a power of two, as
    Triton's tensors need) by masking the lanes past its end."""
    lanes = jnp.arange(block)
    valid = lanes < x_ref.shape[0]
    x = plt.load(x_ref.at[lanes], mask=valid, other=-jnp.inf).astype(jnp.float32)
    e = jnp.exp(x - jnp.max(x))
    plt.store(o_ref.at[lanes], (e / jnp.sum(e)).astype(o_ref.dtype), mask=valid)


@functools.partial(jax.jit, static_argnames=("num_warps", "interpret"))
def softmax(x, *, num_warps: int = 4, interpret: bool = False):
    """Softmax over the last axis: a kernel without a grid for one row, vmapped over the rest."""
    n = x.shape[-1]
    row = pl.pallas_call(
        functools.partial(_softmax_row_kernel, block=pl.next_power_of_2(n)),
        out_shape=jax.ShapeDtypeStruct((n,), x.dtype),
        compiler_params=plt.CompilerParams(num_warps=num_warps, num_stages=1),
        interpret=interpret,
        name="softmax",
    )
    for _ in range(x.ndim - 1):
        row = jax.vmap(row)
    return row(x)


def softmax_reference(x):
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)


def gpu_softmax():
    """(64, 256) f32: 64 programs, one per row."""
    return softmax, (jax.ShapeDtypeStruct((64, 256), jnp.float32),)


# --- flash attention (forward) ---------------------------------------------------------------


def _mha_forward_kernel(q_ref, k_ref, v_ref, o_ref, *, sm_scale: float, block_k: int):
    """One block of queries of one (batch, head) against all its keys, `block_k` at a time,
    keeping a running row maximum and row sum of the exponentials (online softmax)."""
    block_q, head_dim = q_ref.shape
    q = q_ref[...]

    def visit_keys(j, carry):
        max_prev, sum_prev, acc = carry
        keys = pl.ds(j * block_k, block_k)
        s = plt.dot(q, k_ref[keys, :], trans_b=True) * sm_scale  # (block_q, block_k), f32
        row_max = jnp.maximum(max_prev, jnp.max(s, axis=1))
        p = jnp.exp(s - row_max[:, None])
        rescale = jnp.exp(max_prev - row_max)  # the earlier terms, moved to the new maximum
        row_sum = sum_prev * rescale + jnp.sum(p, axis=1)
        acc = acc * rescale[:, None] + plt.dot(p.astype(v_ref.dtype), v_ref[keys, :])
        return row_max, row_sum, acc

    init = (jnp.full((block_q,), -jnp.inf, jnp.float32), jnp.zeros((block_q,), jnp.float32),
            jnp.zeros((block_q, head_dim), jnp.float32))
    _, row_sum, acc = jax.lax.fori_loop(0, k_ref.shape[0] // block_k, visit_keys, init)
    o_ref[...] = (acc / row_sum[:, None]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("sm_scale", "block_q", "block_k", "num_warps",
                                             "num_stages", "interpret"))
def mha(q, k, v, *, sm_scale: float = 1.0, block_q: int = 128, block_k: int = 64,
        num_warps: int | None = None, num_stages: int = 2, interpret: bool = False):
    """Multi-head attention, q/k/v of shape (batch, seq_len, heads, head_dim), no mask.
    Grid: (q_len / block_q, batch, heads); each program sees all of its head's keys."""
    batch, q_len, heads, head_dim = q.shape
    kv_len = k.shape[1]
    block_q, block_k = min(block_q, q_len), min(block_k, kv_len)
    if q_len % block_q or kv_len % block_k:
        raise ValueError(f"{q_len=} and {kv_len=} must be multiples of {block_q=} and {block_k=}")
    if head_dim != pl.next_power_of_2(head_dim):
        raise ValueError(f"{head_dim=} must be a power of two")
    if num_warps is None:
        num_warps = 4 if head_dim <= 64 else 8
    queries = pl.BlockSpec((None, block_q, None, head_dim), lambda i, b, h: (b, i, h, 0))
    keys = pl.BlockSpec((None, kv_len, None, head_dim), lambda i, b, h: (b, 0, h, 0))
    return pl.pallas_call(
        functools.partial(_mha_forward_kernel, sm_scale=sm_scale, block_k=block_k),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(q_len // block_q, batch, heads),
        in_specs=[queries, keys, keys],
        out_specs=queries,
        compiler_params=plt.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=interpret,
        name="mha_forward",
    )(q, k, v)


def mha_reference(q, k, v, *, sm_scale: float = 1.0):
    s = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * sm_scale
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1),
                      v.astype(jnp.float32)).astype(q.dtype)


def gpu_attention():
    """(batch 1, 256 queries and keys, 2 heads, head_dim 64) f16: grid (2, 1, 2)."""
    q = jax.ShapeDtypeStruct((1, 256, 2, 64), jnp.float16)
    return mha, (q, q, q)


# --- layer norm, forward and backward --------------------------------------------------------


def _row_lanes(n: int):
    """The lanes of a row of n elements, padded to a power of two, and which of them are in it."""
    lanes = jnp.arange(pl.next_power_of_2(n))
    return lanes, lanes < n


def _ln_forward_kernel(x_ref, w_ref, b_ref, o_ref, mean_ref, rstd_ref):
    """One row (vmapped over the rows): normalise it, and keep its mean and 1/std for the
    backward pass."""
    n = x_ref.shape[0]
    lanes, valid = _row_lanes(n)
    x = plt.load(x_ref.at[lanes], mask=valid, other=0.0).astype(jnp.float32)
    mean = jnp.sum(x) / n
    centred = jnp.where(valid, x - mean, 0.0)
    rstd = 1.0 / jnp.sqrt(jnp.sum(centred * centred) / n + EPS)
    w = plt.load(w_ref.at[lanes], mask=valid, other=0.0).astype(jnp.float32)
    b = plt.load(b_ref.at[lanes], mask=valid, other=0.0).astype(jnp.float32)
    plt.store(o_ref.at[lanes], (centred * rstd * w + b).astype(o_ref.dtype), mask=valid)
    mean_ref[...] = mean.astype(mean_ref.dtype)
    rstd_ref[...] = rstd.astype(rstd_ref.dtype)


def _ln_forward(x, w, b, interpret):
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[1]
    kernel = pl.pallas_call(
        _ln_forward_kernel,
        out_shape=(jax.ShapeDtypeStruct((n,), x.dtype), jax.ShapeDtypeStruct((), jnp.float32),
                   jax.ShapeDtypeStruct((), jnp.float32)),
        compiler_params=plt.CompilerParams(num_warps=4),
        interpret=interpret,
        name="ln_forward",
    )
    out, mean, rstd = jax.vmap(kernel, in_axes=(0, None, None))(rows, w, b)
    return out.reshape(x.shape), (rows, w, mean, rstd)


def _ln_backward_dx_kernel(x_ref, w_ref, do_ref, mean_ref, rstd_ref, dx_ref):
    """One row of dx = rstd * (w*do - mean(w*do) - x_hat * mean(x_hat * w*do))."""
    n = x_ref.shape[0]
    lanes, valid = _row_lanes(n)
    x = plt.load(x_ref.at[lanes], mask=valid, other=0.0).astype(jnp.float32)
    w = plt.load(w_ref.at[lanes], mask=valid, other=0.0).astype(jnp.float32)
    do = plt.load(do_ref.at[lanes], mask=valid, other=0.0).astype(jnp.float32)
    rstd = rstd_ref[...]
    x_hat = jnp.where(valid, (x - mean_ref[...]) * rstd, 0.0)
    w_do = w * do  # zero on the masked lanes
    dx = (w_do - jnp.sum(w_do) / n - x_hat * (jnp.sum(x_hat * w_do) / n)) * rstd
    plt.store(dx_ref.at[lanes], dx.astype(dx_ref.dtype), mask=valid)


def _ln_backward_dw_db_kernel(x_ref, do_ref, mean_ref, rstd_ref, dw_ref, db_ref, *,
                              block_m: int, block_n: int):
    """dw and db for `block_n` columns (this program's own), summed over the rows
    `block_m` at a time: 2-D tiles gathered with index arrays, masked at both edges."""
    m, n = x_ref.shape
    cols = pl.program_id(0) * block_n + jnp.arange(block_n)
    col_valid = cols < n

    def add_rows(i, acc):
        rows = i * block_m + jnp.arange(block_m)
        row_valid = rows < m
        tile = (rows[:, None], cols[None, :])
        valid = row_valid[:, None] & col_valid[None, :]
        x = plt.load(x_ref.at[tile], mask=valid, other=0.0).astype(jnp.float32)
        do = plt.load(do_ref.at[tile], mask=valid, other=0.0).astype(jnp.float32)
        mean = plt.load(mean_ref.at[rows], mask=row_valid, other=0.0)
        rstd = plt.load(rstd_ref.at[rows], mask=row_valid, other=0.0)
        x_hat = (x - mean[:, None]) * rstd[:, None]
        dw, db = acc
        return dw + jnp.sum(do * x_hat, axis=0), db + jnp.sum(do, axis=0)

    zeros = jnp.zeros((block_n,), jnp.float32)
    dw, db = jax.lax.fori_loop(0, pl.cdiv(m, block_m), add_rows, (zeros, zeros))
    plt.store(dw_ref.at[cols], dw.astype(dw_ref.dtype), mask=col_valid)
    plt.store(db_ref.at[cols], db.astype(db_ref.dtype), mask=col_valid)


def _ln_backward(interpret, residuals, do):
    rows, w, mean, rstd = residuals
    do_rows = do.reshape(rows.shape)
    dx_kernel = pl.pallas_call(
        _ln_backward_dx_kernel,
        out_shape=jax.ShapeDtypeStruct(rows.shape[1:], rows.dtype),
        compiler_params=plt.CompilerParams(num_warps=4),
        interpret=interpret,
        name="ln_backward_dx",
    )
    dx = jax.vmap(dx_kernel, in_axes=(0, None, 0, 0, 0))(rows, w, do_rows, mean, rstd)
    block_m, block_n = 16, 16
    dw, db = pl.pallas_call(
        functools.partial(_ln_backward_dw_db_kernel, block_m=block_m, block_n=block_n),
        out_shape=(jax.ShapeDtypeStruct(w.shape, w.dtype), jax.ShapeDtypeStruct(w.shape, w.dtype)),
        grid=(pl.cdiv(rows.shape[1], block_n),),
        compiler_params=plt.CompilerParams(num_warps=4),
        interpret=interpret,
        name="ln_backward_dw_db",
    )(rows, do_rows, mean, rstd)
    return dx.reshape(do.shape), dw, db


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _layer_norm(x, w, b, interpret):
    return _ln_forward(x, w, b, interpret)[0]


_layer_norm.defvjp(lambda x, w, b, interpret: _ln_forward(x, w, b, interpret), _ln_backward)


def layer_norm(x, w, b, *, interpret: bool = False):
    """Layer norm over the last axis (weight and bias of shape (n,)); its gradient runs the
    kernels ln_backward_dx (one program per row) and ln_backward_dw_db (one per 16 columns)."""
    return _layer_norm(x, w, b, interpret)


def layer_norm_reference(x, w, b):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + EPS) * w + b


def gpu_layer_norm_grad():
    """The gradients of sum(layer_norm(x, w, b) ** 2): the forward kernel, then both backward
    kernels."""

    def fn(x, w, b):
        return jax.grad(lambda *a: jnp.sum(layer_norm(*a) ** 2), argnums=(0, 1, 2))(x, w, b)

    return fn, (_rand((2, 32, 256)), _rand((256,), seed=1), _rand((256,), seed=2))

"""Peer kernels for the Triton backend, written from JAX's own Triton Pallas tests
(`triton_pallas_test.py`, `pallas_test.py`'s Triton and BlockSpec matmuls, `ops_test.py`):
masked loads and stores, reductions, matmuls, atomics and a spin lock.

Each case is a pallaslab case (`(fn, args)`) carrying Triton compiler params, registered with
the expected value JAX's test asserts, computed from the same arguments.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt
from registry import peer

TRITON = plt.CompilerParams()
TRITON_ONE_WARP = plt.CompilerParams(num_warps=1)
TRITON_TESTS = "triton_pallas_test.py::TritonPallasTest"


def _normal(shape: tuple[int, ...], seed: int = 0, dtype=jnp.float32) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), shape, dtype=dtype)


def _triton_call(kernel, **kwargs):
    """`pl.pallas_call` forced onto Triton, the way JAX's Triton tests call it."""
    return pl.pallas_call(kernel, compiler_params=kwargs.pop("compiler_params", TRITON), **kwargs)


# --- masks -------------------------------------------------------------------------------


def _masked_load_store_kernel(x_ref, o_ref, *, block: int):
    idx = pl.program_id(0) * block + jnp.arange(block, dtype=jnp.int32)
    mask = idx < x_ref.shape[0]
    x = plt.load(x_ref.at[idx], mask=mask)
    plt.store(o_ref.at[idx], x + 1.0, mask=mask)


@peer("triton", f"{TRITON_TESTS}::test_masked_load_store", backend="triton",
      reference=lambda x: x + 1.0)
def triton_masked_load_store():
    """129 elements in 32-element programs indexed by `arange` vectors: the fifth program's
    loads and stores are masked past the end."""
    size, block = 129, 32

    def fn(x):
        kernel = functools.partial(_masked_load_store_kernel, block=block)
        return _triton_call(kernel, out_shape=jax.ShapeDtypeStruct((size,), x.dtype),
                            grid=(pl.cdiv(size, block),))(x)

    return fn, (_normal((size,)),)


def _masked_oob_slice_kernel(x_ref, mask_ref, start_ref, o_ref):
    window = pl.ds(start_ref[()], x_ref.shape[0])
    o_ref[...] = plt.load(x_ref.at[window], mask=mask_ref[:], other=-1.0)


def _masked_oob_slice_reference(x, mask, start):
    indices = jnp.arange(x.shape[0]) + start
    return jnp.where(mask, x[indices], jnp.full_like(x, -1.0))


@peer("triton", f"{TRITON_TESTS}::test_masked_oob_load_store_slice", backend="triton",
      reference=_masked_oob_slice_reference)
def triton_masked_oob_slice():
    """A 16-wide window starting at a dynamic offset (5): the elements past the end are
    masked off and read as -1."""
    n, start = 16, 5

    def fn(x, mask, start_idx):
        return _triton_call(_masked_oob_slice_kernel,
                            out_shape=jax.ShapeDtypeStruct((n,), x.dtype))(x, mask, start_idx)

    mask = jnp.arange(n) + start < n
    return fn, (_normal((n,)), mask, jnp.int32(start))


def _masked_swap_kernel(x_in, y_in, mask_ref, x_ref, y_ref):
    del x_in, y_in  # aliased with x_ref and y_ref
    mask = mask_ref[...]
    x, y = x_ref[...], y_ref[...]
    plt.store(y_ref, x, mask=mask)
    plt.store(x_ref, y, mask=mask)


@peer("triton", "ops_test.py::OpsTest::test_masked_swap", backend="triton",
      reference=lambda x, y, mask: (jnp.where(mask, y, x), jnp.where(mask, x, y)))
def triton_masked_swap():
    """Two aliased (16, 32) operands swap the elements a random mask selects (masked
    stores of whole refs)."""
    m, n = 16, 32

    def fn(x, y, mask):
        shape = jax.ShapeDtypeStruct((m, n), x.dtype)
        return _triton_call(_masked_swap_kernel, out_shape=(shape, shape),
                            input_output_aliases={0: 0, 1: 1})(x, y, mask)

    mask = jax.random.bernoulli(jax.random.key(2), shape=(m, n))
    return fn, (_normal((m, n)), _normal((m, n), seed=1), mask)


def _softmax_kernel(x_ref, o_ref, *, block: int):
    cols = jnp.arange(block)
    mask = cols < x_ref.shape[1]
    row = plt.load(x_ref.at[pl.program_id(0), cols], mask=mask, other=-float("inf"))
    numerator = jnp.exp(row - jnp.max(row, axis=0))
    plt.store(o_ref.at[pl.program_id(0), cols], numerator / jnp.sum(numerator, axis=0),
              mask=mask)


@peer("triton", f"{TRITON_TESTS}::test_softmax", backend="triton",
      reference=lambda x: jax.nn.softmax(x, axis=-1))
def triton_masked_softmax():
    """One program per row of a (4, 129) array, each loading a 256-wide masked row."""
    batch, size, block = 4, 129, 256

    def fn(x):
        kernel = functools.partial(_softmax_kernel, block=block)
        return _triton_call(kernel, out_shape=jax.ShapeDtypeStruct((batch, size), x.dtype),
                            grid=(batch,))(x)

    return fn, (_normal((batch, size)),)


def _row_sum_kernel(x_ref, o_ref):
    o_ref[...] = jnp.sum(x_ref[...], axis=-1)


@peer("triton", "ops_test.py::OpsTest::test_reduce_only_dim", backend="triton",
      reference=lambda x: jnp.sum(x, axis=-1))
def triton_reduce_to_scalar():
    """A whole (32,) vector summed into a rank-0 output."""

    def fn(x):
        return _triton_call(_row_sum_kernel, out_shape=jax.ShapeDtypeStruct((), x.dtype))(x)

    return fn, (_normal((32,)),)


# --- layout ------------------------------------------------------------------------------


def _cast_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...].astype(o_ref.dtype)


@peer("triton", f"{TRITON_TESTS}::test_fp_dtype_cast", backend="triton",
      reference=lambda x: x.astype(jnp.bfloat16))
def triton_cast_to_bf16():
    """A (64, 64) float32 block cast to bfloat16 through BlockSpecs over a one-program grid."""

    def fn(x):
        spec = pl.BlockSpec((64, 64), lambda i: (0, 0))
        return _triton_call(_cast_kernel, in_specs=[spec], out_specs=spec, grid=(1,),
                            out_shape=jax.ShapeDtypeStruct((64, 64), jnp.bfloat16))(x)

    return fn, (10 * _normal((64, 64)),)


def _stack_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.stack([x_ref[...], y_ref[...]], axis=-1)


@peer("triton", f"{TRITON_TESTS}::test_float32_stack", backend="triton",
      reference=lambda x, y: jnp.stack([x, y], axis=-1))
def triton_stack_pair():
    """Two (64, 64) blocks interleaved along a new last axis (Triton joins two at most)."""

    def fn(x, y):
        return _triton_call(_stack_kernel, grid=(1,),
                            out_shape=jax.ShapeDtypeStruct((64, 64, 2), x.dtype))(x, y)

    return fn, (_normal((64, 64)), _normal((64, 64), seed=1))


def _gather_kernel(x_ref, i_ref, o_ref):
    o_ref[...] = x_ref[i_ref[...]]


@peer("triton", "pallas_test.py::PallasTritonTest::test_array_indexing", backend="triton",
      reference=lambda x, indices: x[indices])
def triton_gather():
    """A ref indexed by a vector of 128 permuted indices (a gather)."""

    def fn(x, indices):
        return _triton_call(_gather_kernel, out_shape=jax.ShapeDtypeStruct.like(x))(x, indices)

    x = jnp.arange(128, dtype=jnp.float32)
    return fn, (x, jax.random.permutation(jax.random.key(0), jnp.arange(128, dtype=jnp.int32)))


# --- matmul ------------------------------------------------------------------------------


def _dot_kernel(x_ref, y_ref, o_ref):
    o_ref[()] = plt.dot(x_ref[()], y_ref[()])


@peer("triton", f"{TRITON_TESTS}::test_dot_f32_small_dimensions", backend="triton",
      reference=lambda x, y: jnp.full((8, 8), 16.0, jnp.float32))
def triton_dot_small():
    """`plt.dot` of (8, 16) by (16, 8) ones with one warp: every entry is 16."""

    def fn(x, y):
        return _triton_call(_dot_kernel, compiler_params=TRITON_ONE_WARP,
                            out_shape=jax.ShapeDtypeStruct((8, 8), jnp.float32))(x, y)

    return fn, (jnp.ones((8, 16), jnp.float32), jnp.ones((16, 8), jnp.float32))


def _grouped_matmul_kernel(x_ref, y_ref, o_ref, *, bm: int, bn: int, bk: int, gm: int):
    """Programs visit output tiles in groups of `gm` rows (Triton's L2-friendly order)."""
    m, k = x_ref.shape
    n = y_ref.shape[1]
    pid = pl.program_id(0)
    pids_in_group = gm * (n // bn)
    first_m = (pid // pids_in_group) * gm
    group_rows = jnp.minimum(m // bm - first_m, gm)
    pid_m = first_m + lax.rem(pid, group_rows)
    pid_n = lax.rem(pid, pids_in_group) // group_rows
    rows = plt.max_contiguous(pl.multiple_of(pid_m * bm + jnp.arange(bm), bm), bm)
    cols = plt.max_contiguous(pl.multiple_of(pid_n * bn + jnp.arange(bn), bn), bn)

    def step(i, acc):
        ks = i * bk + jnp.arange(bk)
        x = x_ref[lax.broadcast_in_dim(rows, (bm, bk), (0,)),
                  lax.broadcast_in_dim(ks, (bm, bk), (1,))]
        y = y_ref[lax.broadcast_in_dim(ks, (bk, bn), (0,)),
                  lax.broadcast_in_dim(cols, (bk, bn), (1,))]
        return acc + plt.dot(x, y)

    acc = lax.fori_loop(0, k // bk, step, jnp.zeros((bm, bn), jnp.float32))
    o_ref[lax.broadcast_in_dim(rows, (bm, bn), (0,)),
          lax.broadcast_in_dim(cols, (bm, bn), (1,))] = acc.astype(o_ref.dtype)


def _matmul_reference(x, y):
    return jnp.matmul(x, y, preferred_element_type=jnp.float32)


@peer("triton", f"{TRITON_TESTS}::test_matmul", backend="triton", reference=_matmul_reference)
def triton_grouped_matmul():
    """(128, 64) @ (64, 128) in 64x64 output tiles addressed by gathered index vectors,
    accumulating 32-deep `plt.dot`s in a `fori_loop`, tiles visited in grouped order."""
    m, k, n, bm, bn = 128, 64, 128, 64, 64

    def fn(x, y):
        kernel = functools.partial(_grouped_matmul_kernel, bm=bm, bn=bn, bk=32, gm=8)
        return _triton_call(kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
                            grid=((m // bm) * (n // bn),))(x, y)

    return fn, (_normal((m, k)), _normal((k, n), seed=1))


def _blockspec_matmul_kernel(x_ref, y_ref, o_ref, *, bk: int):
    def step(i, acc):
        x = x_ref[:, pl.ds(i * bk, bk)]
        y = y_ref[pl.ds(i * bk, bk), :]
        return acc + jnp.dot(x, y, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, x_ref.shape[1] // bk, step, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[:, :] = acc.astype(o_ref.dtype)


@peer("triton", "pallas_test.py::PallasCallTest::test_matmul_block_spec", backend="triton",
      reference=_matmul_reference)
def triton_blockspec_matmul():
    """(128, 64) @ (64, 128) with BlockSpecs: (64, K) row panels and (K, 64) column panels
    over a (2, 2) grid, reduced in 32-deep `pl.ds` slices."""
    m, k, n, bm, bn = 128, 64, 128, 64, 64

    def fn(x, y):
        return _triton_call(
            functools.partial(_blockspec_matmul_kernel, bk=32),
            out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(m // bm, n // bn),
            in_specs=[pl.BlockSpec((bm, k), lambda i, _: (i, 0)),
                      pl.BlockSpec((k, bn), lambda _, j: (0, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)))(x, y)

    return fn, (_normal((m, k)), _normal((k, n), seed=1))


def _masked_dot_kernel(x_ref, y_ref, o_ref, *, bk: int):
    rows, cols, ks = jnp.arange(x_ref.shape[0]), jnp.arange(y_ref.shape[1]), jnp.arange(bk)
    k_in = ks < x_ref.shape[1]
    x = plt.load(x_ref.at[lax.broadcast_in_dim(rows, (rows.size, bk), (0,)),
                          lax.broadcast_in_dim(ks, (rows.size, bk), (1,))],
                 mask=lax.broadcast_in_dim(k_in, (rows.size, bk), (1,)), other=0.0)
    y = plt.load(y_ref.at[lax.broadcast_in_dim(ks, (bk, cols.size), (0,)),
                          lax.broadcast_in_dim(cols, (bk, cols.size), (1,))],
                 mask=lax.broadcast_in_dim(k_in, (bk, cols.size), (0,)), other=0.0)
    o_ref[...] = plt.dot(x, y)


@peer("triton", f"{TRITON_TESTS}::test_matmul (a K not a power of two, masked)",
      backend="triton", reference=_matmul_reference)
def triton_masked_dot():
    """(32, 40) @ (40, 32): K is loaded 64 wide with the 24 columns past its end masked to
    zero, then one `plt.dot` (Triton blocks must be powers of two)."""

    def fn(x, y):
        kernel = functools.partial(_masked_dot_kernel, bk=64)
        return _triton_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 32), jnp.float32))(x, y)

    return fn, (_normal((32, 40)), _normal((40, 32), seed=1))


def _unsigned_dot_kernel(x_ref, y_ref, o_ref):
    o_ref[()] = plt.dot(x_ref[()], y_ref[()])


@peer("triton", f"{TRITON_TESTS}::test_unsigned_integer_dot_raises", backend="triton",
      reference=None, compiles=False, rejected_by="unsupported-op")
def triton_unsigned_dot():
    """`plt.dot` of uint8 operands: Triton lowering says unsigned integer dots are not
    supported (JAX's test expects NotImplementedError)."""

    def fn(x, y):
        return _triton_call(_unsigned_dot_kernel,
                            out_shape=jax.ShapeDtypeStruct((32, 64), jnp.int32))(x, y)

    return fn, (jnp.ones((32, 128), jnp.uint8), jnp.ones((128, 64), jnp.uint8))


# --- atomics -----------------------------------------------------------------------------

def _scalar_atomic_kernel(x_ref, init_ref, o_ref, *, op):
    del init_ref  # aliased with o_ref: the neutral element
    op(o_ref, (), x_ref[pl.program_id(0)])


def _scalar_atomic_case(op, values: np.ndarray, neutral):
    def fn(x, init):
        kernel = functools.partial(_scalar_atomic_kernel, op=op)
        return _triton_call(kernel, out_shape=jax.ShapeDtypeStruct((), x.dtype),
                            grid=(x.shape[0],), input_output_aliases={1: 0})(x, init)

    return fn, (jnp.asarray(values), jnp.asarray(neutral, values.dtype))


@peer("triton", f"{TRITON_TESTS}::test_scalar_atomic[add_f32]", backend="triton",
      reference=lambda x, init: jnp.sum(x))
def triton_scalar_atomic_add():
    """Four programs each `atomic_add` one element into a rank-0 output aliased to 0."""
    return _scalar_atomic_case(plt.atomic_add, np.array([1, 2, 3, 4], np.float32), 0.0)


@peer("triton", f"{TRITON_TESTS}::test_scalar_atomic[max_i32]", backend="triton",
      reference=lambda x, init: jnp.max(x))
def triton_scalar_atomic_max():
    """Four programs each `atomic_max` one int32 into a rank-0 output aliased to INT_MIN."""
    values = np.array([1, 2, 3, 4], np.int32)
    return _scalar_atomic_case(plt.atomic_max, values, np.iinfo(np.int32).min)


def _array_atomic_add_kernel(x_ref, init_ref, y_ref, *, axis: int):
    del init_ref  # aliased with y_ref: zeros
    i = pl.program_id(0)
    m, n = x_ref.shape
    partial = x_ref[i, jnp.arange(n)] if axis == 0 else x_ref[jnp.arange(m), i]
    plt.atomic_add(y_ref, (jnp.arange(y_ref.shape[0]),), partial)


def _array_atomic_add_case(axis: int):
    m, n = 32, 8

    def fn(x, init):
        kernel = functools.partial(_array_atomic_add_kernel, axis=axis)
        return _triton_call(kernel, out_shape=jax.ShapeDtypeStruct(init.shape, init.dtype),
                            grid=(x.shape[axis],), input_output_aliases={1: 0})(x, init)

    return fn, (_normal((m, n)), jnp.zeros((n if axis == 0 else m,), jnp.float32))


@peer("triton", f"{TRITON_TESTS}::test_array_atomic_add[0]", backend="triton",
      reference=lambda x, init: jnp.sum(x, axis=0))
def triton_atomic_add_rows():
    """32 programs, one per row of a (32, 8) array, `atomic_add` their row into one (8,)
    output: a column sum with no race."""
    return _array_atomic_add_case(axis=0)


@peer("triton", f"{TRITON_TESTS}::test_array_atomic_add[1]", backend="triton",
      reference=lambda x, init: jnp.sum(x, axis=1))
def triton_atomic_add_columns():
    """8 programs, one per column of a (32, 8) array, `atomic_add` their column into one
    (32,) output: a row sum with no race."""
    return _array_atomic_add_case(axis=1)


def _cas_kernel(lock_in, lock_ref, old_ref, *, cmp: int, new: int):
    del lock_in  # aliased with lock_ref
    old_ref[()] = plt.atomic_cas(lock_ref, cmp, new)


def _cas_reference(lock):
    return jnp.where(lock == 0, 1, lock), lock


@peer("triton", f"{TRITON_TESTS}::test_atomic_cas", backend="triton", reference=_cas_reference)
def triton_atomic_cas():
    """`atomic_cas(lock, 0, 1)` on a rank-0 lock aliased to 0: the lock becomes 1 and the
    old value 0 comes back."""

    def fn(lock):
        scalar = jax.ShapeDtypeStruct((), jnp.int32)
        kernel = functools.partial(_cas_kernel, cmp=0, new=1)
        return _triton_call(kernel, out_shape=(scalar, scalar),
                            input_output_aliases={0: 0})(lock)

    return fn, (jnp.int32(0),)


def _counter_kernel(lock_in, count_in, lock_ref, count_ref):
    del lock_in, count_in  # aliased with lock_ref and count_ref

    def locked(_):
        return plt.atomic_cas(lock_ref, 0, 1) == 1

    lax.while_loop(locked, lambda spin: spin, 0)  # spin until this program takes the lock
    count_ref[...] += 1
    plt.atomic_xchg(lock_ref, (), 0)


@peer("triton", f"{TRITON_TESTS}::test_atomic_counter", backend="triton",
      reference=lambda lock, count: (jnp.int32(0), count + 4))
def triton_spin_lock_counter():
    """Four programs take a spin lock (`atomic_cas` in a while loop), increment a shared
    counter and release the lock with `atomic_xchg`."""

    def fn(lock, count):
        scalar = jax.ShapeDtypeStruct((), jnp.int32)
        return _triton_call(_counter_kernel, out_shape=(scalar, scalar), grid=(4,),
                            input_output_aliases={0: 0, 1: 1})(lock, count)

    return fn, (jnp.int32(0), jnp.int32(0))

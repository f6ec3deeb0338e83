"""Triton atomics JAX's HLO interpreter cannot run (a rank-0 atomic: "not enough values to
unpack"; `atomic_xchg`: "AtomicOpType.XCHG"; the spin locks built from them) run under
pallaslab's executors, applied in program order (`pallaslab/model/_jax/atomics.py`): each
correct kernel compares ALL CLOSE against its plain-JAX reference with no executor named, and
a wrong variant of each (an atomic on the wrong index, a store where an atomic was meant,
xchg where add was meant) is a MISMATCH."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from catalog import rand
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

from pallaslab import compare, run, step
from pallaslab.model._jax.atomics import NOTE

TRITON = plt.CompilerParams(num_warps=4)
BLOCK = 8


# --- a rank-0 counter: every program adds its block's sum ----------------------------------

def _counter_kernel(x_ref, init_ref, o_ref, *, mutant: str | None):
    del init_ref  # aliased with o_ref: zero
    total = jnp.sum(x_ref[...])
    if mutant == "store":  # a plain store where the atomic add was meant
        o_ref[...] = total
    elif mutant == "xchg":
        plt.atomic_xchg(o_ref, (), total)
    else:
        plt.atomic_add(o_ref, (), total)


def rank0_counter(mutant: str | None = None):
    def fn(x):
        return pl.pallas_call(
            functools.partial(_counter_kernel, mutant=mutant), grid=(x.shape[0] // BLOCK,),
            in_specs=[pl.BlockSpec((BLOCK,), lambda i: (i,)), pl.BlockSpec((), lambda i: ())],
            out_specs=pl.BlockSpec((), lambda i: ()),
            out_shape=jax.ShapeDtypeStruct((), x.dtype), input_output_aliases={1: 0},
            compiler_params=TRITON)(x, jnp.zeros((), x.dtype))

    return fn, (rand((32,)),), jnp.sum


# --- atomic_xchg: each program swaps its value in and hands back the old one ----------------

def _swap_kernel(x_ref, init_ref, o_ref, old_ref, *, mutant: str | None):
    del init_ref  # aliased with o_ref: the values swapped out
    i = pl.program_id(0)
    n = o_ref.shape[0]
    where = (i + 1) % n if mutant == "index" else i
    swap = plt.atomic_add if mutant == "add" else plt.atomic_xchg
    old_ref[pl.ds(i, 1)] = swap(o_ref, pl.ds(where, 1), x_ref[pl.ds(i, 1)])


def atomic_swap(mutant: str | None = None):
    def fn(x, y):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(
            functools.partial(_swap_kernel, mutant=mutant), grid=(x.shape[0],),
            out_shape=(out, out), input_output_aliases={1: 0}, compiler_params=TRITON)(x, y)

    return fn, (rand((8,)), rand((8,), seed=1)), lambda x, y: (x, y)


# --- split-K: each program atomic_adds its partial product into its rows of the output -----

def _split_k_kernel(x_ref, w_ref, init_ref, o_ref, *, mutant: str | None):
    del init_ref  # aliased with o_ref: zeros
    i = pl.program_id(0)
    rows = o_ref.shape[0] // pl.num_programs(0)
    where = (i + 1) % pl.num_programs(0) if mutant == "index" else i
    partial = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    update = plt.atomic_xchg if mutant == "xchg" else plt.atomic_add
    update(o_ref, (pl.ds(where * rows, rows), slice(None)), partial)


def split_k_matmul(mutant: str | None = None):
    bm, bk = 16, 32

    def fn(x, w):
        (m, k), n = x.shape, w.shape[1]
        return pl.pallas_call(
            functools.partial(_split_k_kernel, mutant=mutant), grid=(m // bm, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j: (i, j)),
                      pl.BlockSpec((bk, n), lambda i, j: (j, 0)),
                      pl.BlockSpec((m, n), lambda i, j: (0, 0))],
            out_specs=pl.BlockSpec((m, n), lambda i, j: (0, 0)),
            out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), input_output_aliases={2: 0},
            compiler_params=TRITON)(x, w, jnp.zeros((m, n), jnp.float32))

    return fn, (rand((32, 128)), rand((128, 16), seed=1)), \
        lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32)


# --- a spin lock (atomic_cas / atomic_xchg) guarding a read-modify-write ---------------------

def _locked_kernel(x_ref, lock_in, total_in, lock_ref, total_ref, *, mutant: str | None):
    del lock_in, total_in  # aliased with lock_ref and total_ref: zeros
    jax.lax.while_loop(lambda held: held != 0, lambda _: plt.atomic_cas(lock_ref, 0, 1),
                       jnp.int32(1))  # spin until this program takes the lock
    slot = 0 if mutant == "index" else pl.program_id(0) % 2
    total_ref[pl.ds(slot, 1)] += jnp.sum(x_ref[...], keepdims=True)  # guarded, not atomic
    plt.atomic_xchg(lock_ref, (), 0)


def _locked_reference(x):
    sums = jnp.sum(x.reshape(-1, BLOCK), axis=1)
    return jnp.int32(0), jnp.stack([jnp.sum(sums[0::2]), jnp.sum(sums[1::2])])


def spin_lock(mutant: str | None = None):
    def fn(x):
        return pl.pallas_call(
            functools.partial(_locked_kernel, mutant=mutant), grid=(x.shape[0] // BLOCK,),
            in_specs=[pl.BlockSpec((BLOCK,), lambda i: (i,)),
                      pl.BlockSpec((), lambda i: ()), pl.BlockSpec((2,), lambda i: (0,))],
            out_specs=[pl.BlockSpec((), lambda i: ()), pl.BlockSpec((2,), lambda i: (0,))],
            out_shape=[jax.ShapeDtypeStruct((), jnp.int32),
                       jax.ShapeDtypeStruct((2,), x.dtype)],
            input_output_aliases={1: 0, 2: 1}, compiler_params=TRITON)(
                x, jnp.zeros((), jnp.int32), jnp.zeros((2,), x.dtype))

    return fn, (rand((32,)),), _locked_reference


# --- a histogram: lanes of one atomic add hit the same bin, and every lane counts -----------

BINS = 16
LOWEST = int(np.iinfo(np.int32).min)


def _histogram_kernel(idx_ref, init_ref, low_ref, o_ref, peak_ref, *, mutant: str | None):
    del init_ref, low_ref  # aliased with o_ref and peak_ref: zero counts, the lowest int32
    idx = idx_ref[...]
    if mutant == "index":  # every lane one bin off (wrapping)
        idx = (idx + 1) % BINS
    add = plt.atomic_xchg if mutant == "xchg" else plt.atomic_add
    add(o_ref, (idx,), jnp.ones(idx.shape, o_ref.dtype))
    # the largest index seen per bin, over the lanes of the first half of the block only
    half = jax.lax.broadcasted_iota(jnp.int32, idx.shape, 0) < idx.shape[0] // 2
    plt.atomic_max(peak_ref, (idx,), idx, mask=half)


def histogram(mutant: str | None = None):
    def fn(idx):
        return pl.pallas_call(
            functools.partial(_histogram_kernel, mutant=mutant), grid=(idx.shape[0] // 64,),
            in_specs=[pl.BlockSpec((64,), lambda i: (i,)),
                      pl.BlockSpec((BINS,), lambda i: (0,)),
                      pl.BlockSpec((BINS,), lambda i: (0,))],
            out_specs=[pl.BlockSpec((BINS,), lambda i: (0,)),
                       pl.BlockSpec((BINS,), lambda i: (0,))],
            out_shape=[jax.ShapeDtypeStruct((BINS,), jnp.float32),
                       jax.ShapeDtypeStruct((BINS,), jnp.int32)],
            input_output_aliases={1: 0, 2: 1}, compiler_params=TRITON)(
                idx, jnp.zeros((BINS,), jnp.float32), jnp.full((BINS,), LOWEST, jnp.int32))

    def reference(idx):
        half = (jnp.arange(idx.shape[0]) % 64) < 32
        peak = jnp.full((BINS,), LOWEST, jnp.int32)
        return [jnp.zeros((BINS,), jnp.float32).at[idx].add(1.0),
                peak.at[jnp.where(half, idx, 0)].max(jnp.where(half, idx, peak[0]))]

    idx = jnp.asarray(np.random.default_rng(0).integers(0, BINS, 256), jnp.int32)
    return fn, (idx,), reference


KERNELS = {"rank0_counter": rank0_counter, "atomic_swap": atomic_swap,
           "split_k_matmul": split_k_matmul, "spin_lock": spin_lock, "histogram": histogram}
MUTANTS = [("rank0_counter", "store"), ("rank0_counter", "xchg"), ("atomic_swap", "index"),
           ("atomic_swap", "add"), ("split_k_matmul", "index"), ("split_k_matmul", "xchg"),
           ("spin_lock", "index"), ("histogram", "index"), ("histogram", "xchg")]


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_correct_atomic_kernel_compares_all_close_with_no_executor_named(name):
    fn, args, reference = KERNELS[name]()
    result = compare(fn, *args, reference=reference)
    assert result.complete, result.verdict()
    assert result.allclose and result.passed, result.verdict()
    ran = result.results[0]
    assert ran.status == "ran" and NOTE in ran.notes


@pytest.mark.parametrize(("name", "mutant"), MUTANTS)
def test_a_wrong_atomic_kernel_is_a_mismatch(name, mutant):
    fn, args, reference = KERNELS[name](mutant)
    result = compare(fn, *args, reference=reference)
    assert result.complete, result.verdict()
    assert not result.allclose, result.verdict()


def test_the_rank0_counter_runs_under_interpret_with_the_sum_and_says_what_it_models():
    fn, args, reference = rank0_counter()
    result = run(fn, *args, executor="interpret")
    assert result.status == "ran", result.reason
    np.testing.assert_allclose(result.outputs[0], reference(*args), rtol=1e-5)
    assert result.notes[-1] == ("atomics applied in program order (programs run one at a time, "
                                "so a spin lock is always free when taken); the order of "
                                "concurrent atomics on a GPU is not modelled")


def test_atomics_return_the_old_values_and_a_masked_atomic_leaves_its_lanes_alone():
    def kernel(x_ref, init_ref, o_ref, old_ref):
        del init_ref
        mask = jnp.arange(8) % 2 == 0
        old_ref[...] = plt.atomic_max(o_ref, pl.ds(0, 8), x_ref[...], mask=mask)

    def fn(x, y):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(kernel, out_shape=(out, out), input_output_aliases={1: 0},
                              compiler_params=TRITON)(x, y)

    x, y = jnp.arange(8, dtype=jnp.int32) - 4, jnp.zeros((8,), jnp.int32)
    result = run(fn, x, y, executor="interpret")
    assert result.status == "ran", result.reason
    even = np.arange(8) % 2 == 0
    np.testing.assert_array_equal(result.outputs[0], np.where(even, np.maximum(x, 0), 0))
    np.testing.assert_array_equal(result.outputs[1][even], np.zeros(4, np.int32))


def test_the_user_s_own_interpret_mode_is_untouched():
    """Only pallaslab's run rewrites the atomics: JAX's interpreter still refuses them."""
    fn, args, _ = rank0_counter()
    run(fn, *args, executor="interpret")
    with pytest.raises(ValueError, match="not enough values to unpack"):
        jax.jit(lambda x: pl.pallas_call(
            functools.partial(_counter_kernel, mutant=None), grid=(4,),
            in_specs=[pl.BlockSpec((BLOCK,), lambda i: (i,)), pl.BlockSpec((), lambda i: ())],
            out_specs=pl.BlockSpec((), lambda i: ()),
            out_shape=jax.ShapeDtypeStruct((), x.dtype), input_output_aliases={1: 0},
            interpret=True)(x, jnp.zeros((), x.dtype)))(*args)


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def test_vectorized_batches_the_other_kernels_and_interprets_the_atomic_one_itself():
    """No fallback of the whole function: the atomic kernel runs inside vectorized's own
    computation, its atomics in program order."""
    counter, _, _ = rank0_counter()

    def fn(x):
        spec = pl.BlockSpec((BLOCK,), lambda i: (i,))
        doubled = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                 grid=(x.shape[0] // BLOCK,), in_specs=[spec], out_specs=spec,
                                 compiler_params=TRITON)(x)
        return counter(doubled)

    x = rand((32,))
    result = run(fn, x, executor="vectorized")
    assert result.status == "ran" and result.fallback is None and result.ran_under is None
    assert [b.how for b in result.batching] == ["batched", "interpreted"]
    assert NOTE in result.notes
    np.testing.assert_allclose(result.outputs[0], 2 * np.sum(x), rtol=1e-5)


@pytest.mark.parametrize("name", list(KERNELS))
def test_stepping_an_atomic_kernel_program_by_program_gives_its_reference(name):
    fn, args, reference = KERNELS[name]()
    stepper = step(fn, *args)
    stepper.step(stepper.programs)
    for ours, theirs in zip(stepper.outputs(), jax.tree.leaves(reference(*args)), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_stepping_back_over_an_atomic_undoes_it():
    fn, args, _ = rank0_counter()
    stepper = step(fn, *args)
    stepper.step(2)
    after_two = stepper.outputs()[0].copy()
    stepper.step()
    stepper.back()
    np.testing.assert_array_equal(stepper.outputs()[0], after_two)
    np.testing.assert_allclose(after_two, np.sum(np.asarray(args[0])[:2 * BLOCK]), rtol=1e-5)

"""Compiled functions kept across captures (issue 10 speed): a re-run of an identical kernel
reuses the whole-grid index maps and the value run's compiled kernel; any difference (block
shape, index map, kernel body) compiles afresh and gives that kernel's own results."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from kernels import matmul, rand

import pallaslab
from pallaslab.execute.executors.auto import evaluate
from pallaslab.model._jax.compiled import (
    CacheStats,
    Unkeyable,
    equation_cache_stats,
    structural_key,
)
from pallaslab.model._jax.index_maps import index_map_cache_stats

N, BLOCK = 48, 8  # shapes no other test uses, so the first capture here is a miss


def delta(after: CacheStats, before: CacheStats) -> tuple[int, int, int]:
    """(hits, misses, uncacheable) since `before`."""
    return (after.hits - before.hits, after.misses - before.misses,
            after.uncacheable - before.uncacheable)


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def blocked_copy(x, *, block=BLOCK, reverse=False):
    n = x.shape[0] // block
    index = (lambda i: (n - 1 - i,)) if reverse else (lambda i: (i,))
    return pl.pallas_call(
        copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n,),
        in_specs=[pl.BlockSpec((block,), index)], out_specs=pl.BlockSpec((block,), index),
        interpret=True,
    )(x)


def x48():
    return jnp.arange(N, dtype=jnp.float32)


def test_index_maps_are_reused_by_an_identical_recapture_and_not_across_block_shapes():
    x = x48()
    start = index_map_cache_stats()
    pallaslab.capture(blocked_copy, x)
    assert delta(index_map_cache_stats(), start) == (0, 1, 0)
    pallaslab.capture(blocked_copy, x)
    assert delta(index_map_cache_stats(), start) == (1, 1, 0)
    other = pallaslab.capture(lambda a: blocked_copy(a, block=16), x)
    assert delta(index_map_cache_stats(), start) == (1, 2, 0)
    # the other block shape's own tables
    ids = np.arange(N // 16, dtype=np.int32)[None]
    assert other.kernels[0].handle.index_map_evaluator(ids, [])[0][:, 0].tolist() == [0, 1, 2]


def test_a_different_index_map_of_the_same_shapes_is_never_served_from_the_cache():
    x = x48()
    ids = np.arange(N // BLOCK, dtype=np.int32)[None]
    forward = pallaslab.capture(blocked_copy, x).kernels[0]
    reverse = pallaslab.capture(lambda a: blocked_copy(a, reverse=True), x).kernels[0]
    assert forward.handle.index_map_evaluator(ids, [])[0][:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    assert reverse.handle.index_map_evaluator(ids, [])[0][:, 0].tolist() == [5, 4, 3, 2, 1, 0]


def test_the_value_run_reuses_the_compiled_kernel_of_an_identical_recapture():
    x, y = rand((64, 96)), rand((96, 32), seed=1)
    plain = np.asarray(matmul(x, y, bm=32, bk=32, bn=32, interpret=True))

    def run(**blocks):
        cap = pallaslab.capture(lambda a, b: matmul(a, b, interpret=True, **blocks), x, y)
        evaluation = evaluate(cap)
        assert evaluation.ok, evaluation.error
        return np.asarray(evaluation.outputs[0])

    start = equation_cache_stats()
    np.testing.assert_array_equal(run(bm=32, bk=32, bn=32), plain)
    assert delta(equation_cache_stats(), start) == (0, 1, 0)
    np.testing.assert_array_equal(run(bm=32, bk=32, bn=32), plain)
    assert delta(equation_cache_stats(), start) == (1, 1, 0)
    # other blocks sum in another order: equal up to float rounding
    np.testing.assert_allclose(run(bm=16, bk=32, bn=32), plain, rtol=1e-5, atol=1e-5)
    assert delta(equation_cache_stats(), start) == (1, 2, 0)


def test_kernels_differing_only_in_their_body_get_their_own_values():
    x = x48()

    def plus(c):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + c
        return lambda a: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
                                        interpret=True)(a)

    for c in (1.0, 2.0, 1.0):
        value = evaluate(pallaslab.capture(plus(c), x)).outputs[0]
        np.testing.assert_array_equal(np.asarray(value), np.asarray(x) + c)


def test_an_equation_with_a_function_in_its_params_runs_uncached():
    """`custom_vjp` keeps its output trees as a function: no value key, so the equation is
    bound as the plain call binds it, every time."""

    @jax.custom_vjp
    def f(a):
        return blocked_copy(a) * 2.0

    f.defvjp(lambda a: (f(a), None), lambda _, g: (g,))
    x = x48()
    start = equation_cache_stats()
    value = evaluate(pallaslab.capture(f, x)).outputs[0]
    np.testing.assert_array_equal(np.asarray(value), (np.asarray(x) + 1.0) * 2.0)
    assert delta(equation_cache_stats(), start) == (0, 0, 1)


def test_structural_keys_see_values_not_objects():
    assert structural_key(np.arange(4)) == structural_key(np.arange(4))
    assert structural_key(np.arange(4)) != structural_key(np.arange(1, 5))
    assert structural_key(np.zeros(4, np.float32)) != structural_key(np.zeros(4, np.int32))

    @dataclasses.dataclass(frozen=True)
    class Params:
        block: tuple[int, ...]

    assert structural_key(Params((8, 128))) == structural_key(Params((8, 128)))
    assert structural_key(Params((8, 128))) != structural_key(Params((16, 128)))
    with pytest.raises(Unkeyable):
        structural_key({"rule": lambda: None})

"""Grids and scalar-prefetch values computed by an earlier kernel are evaluated from concrete
arguments (the earlier kernel runs under the interpreter during capture); when they cannot
be, the message says the true reason (issue 16)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from catalog import abstract
from kernels import CATALOG
from kernels_prod import block_order, gather_blocks, ordered_blocks

import pallaslab
from pallaslab.analysis.tiling import tile, tiling_unavailable_reason


def test_a_grid_computed_by_an_earlier_kernel_is_known():
    fn, args = CATALOG["grid_from_earlier_kernel"].case()
    first, second = pallaslab.capture(fn, *args)
    assert first.name == "_count_positive_kernel" and second.grid == (8,)
    assert second.dynamic_values_reason is None
    tiling = tile(second)
    assert tiling is not None
    np.testing.assert_array_equal(tiling.operands["outputs"].block_indices[:, 0], np.arange(8))


def test_prefetch_values_computed_by_an_earlier_kernel_are_known():
    fn, args = CATALOG["prefetch_from_earlier_kernel"].case()
    _, gather = pallaslab.capture(fn, *args)
    expected = np.asarray(block_order(args[0]))
    np.testing.assert_array_equal(gather.prefetch_values[0], expected)
    tiling = tile(gather)
    np.testing.assert_array_equal(tiling.operands["args[1]"].block_indices[:, 0], expected)


def test_abstract_arguments_still_say_pass_concrete_arrays():
    fn, args = CATALOG["prefetch_from_earlier_kernel"].case()
    _, gather = pallaslab.capture(fn, *abstract(args))
    assert tiling_unavailable_reason(gather) == (
        "index maps read scalar-prefetch operands whose values are unknown: pass concrete "
        "arrays to evaluate them")


def test_values_from_a_kernel_capture_cannot_run_say_why():
    def fn(x):
        order = jax.lax.cond(x[0, 0] > -100.0, ordered_blocks,
                             lambda v: jnp.arange(4, dtype=jnp.int32), x)
        return gather_blocks(order, x)

    _, args = CATALOG["prefetch_from_earlier_kernel"].case()
    gather = pallaslab.capture(fn, *args)[-1]
    assert gather.prefetch_values == ()
    assert tiling_unavailable_reason(gather) == (
        "index maps read scalar-prefetch operands whose values are unknown: they are computed "
        "from the output of a loop or conditional, which capture does not run")

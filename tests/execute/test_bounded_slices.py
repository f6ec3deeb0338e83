"""Varying-size `pl.BoundedSlice` windows (JAX's interpreters stop at them: "Unsupported block
dim type: BoundedSlice" in interpret mode, a failure inside TPU interpret mode's own code) run
under pallaslab's `interpret`, each grid step's block at its own size as the TPU pipeline
copies it (`pallaslab/model/_jax/bounded_slices.py`): a correct kernel compares ALL CLOSE with
no executor named, a window one row short or a body that reads past its window does not."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pallaslab import compare, run
from pallaslab.model._jax.bounded_slices import NOTE

ROWS, LANES, BOUND = 16, 128, 8
STARTS = np.array([0, 3, 8], np.int32)  # windows [0, 3), [3, 8), [8, 16)
SIZES = np.array([3, 5, 8], np.int32)


def _x():
    return jnp.arange(ROWS * LANES, dtype=jnp.float32).reshape(ROWS, LANES) / 100.0


def _window_spec():
    return pl.BlockSpec((pl.BoundedSlice(BOUND), LANES),
                        lambda i, starts, sizes: (pl.ds(starts[i], sizes[i]), 0))


# --- each window scaled in place: inputs and outputs both windowed --------------------------

def _scale_kernel(starts_ref, sizes_ref, x_ref, o_ref):
    del starts_ref, sizes_ref
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def scaled_windows(mutant: str | None = None):
    sizes = SIZES - np.array([0, 1, 0], np.int32) if mutant == "short" else SIZES

    def fn(x):
        return pl.pallas_call(
            _scale_kernel,
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=2, grid=(len(STARTS),),
                in_specs=[_window_spec()], out_specs=_window_spec()),
            out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        )(jnp.asarray(STARTS), jnp.asarray(sizes), x)

    return fn, (_x(),), lambda x: x * 2.0 + 1.0


# --- a ragged segment sum: a window in, one blocked row out -----------------------------------

def _segment_sum_kernel(starts_ref, sizes_ref, x_ref, o_ref, *, mutant):
    del starts_ref
    block = x_ref[...]
    if mutant != "whole-block":  # the rows past the window's size are undefined
        rows = jax.lax.broadcasted_iota(jnp.int32, block.shape, 0)
        block = jnp.where(rows < sizes_ref[pl.program_id(0)], block, 0.0)
    o_ref[...] = jnp.sum(block, axis=0, keepdims=True)


def segment_sums(mutant: str | None = None):
    def fn(x):
        return pl.pallas_call(
            functools.partial(_segment_sum_kernel, mutant=mutant),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=2, grid=(len(STARTS),),
                in_specs=[_window_spec()],
                out_specs=pl.BlockSpec((pl.Squeezed(), 1, LANES),
                                       lambda i, starts, sizes: (i, 0, 0))),
            out_shape=jax.ShapeDtypeStruct((len(STARTS), 1, LANES), jnp.float32),
        )(jnp.asarray(STARTS), jnp.asarray(SIZES), x)

    def reference(x):
        return jnp.stack([x[s:s + n].sum(axis=0, keepdims=True)
                          for s, n in zip(STARTS, SIZES, strict=True)])

    return fn, (_x(),), reference


KERNELS = {"scaled_windows": scaled_windows, "segment_sums": segment_sums}


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_correct_bounded_slice_kernel_compares_all_close_with_no_executor_named(name):
    fn, args, _ = KERNELS[name]()
    result = compare(fn, *args)
    assert result.allclose and result.passed, result.verdict()
    assert all(r.status == "ran" and NOTE in r.notes for r in result.results)


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_correct_bounded_slice_kernel_matches_its_reference(name):
    fn, args, reference = KERNELS[name]()
    result = compare(fn, *args, reference=reference)
    assert result.allclose and result.passed, result.verdict()


def test_interpret_runs_each_window_at_its_own_size_and_says_what_it_models():
    fn, args, reference = scaled_windows()
    result = run(fn, *args, executor="interpret")
    assert result.status == "ran", result.reason
    np.testing.assert_allclose(result.outputs[0], reference(*args), rtol=1e-6)
    assert NOTE in result.notes
    assert "not modelled" in NOTE


def test_tpu_interpret_says_it_cannot_run_a_window():
    fn, args, _ = scaled_windows()
    result = run(fn, *args, executor="tpu-interpret")
    assert result.status == "unavailable"
    assert "pl.BoundedSlice window" in result.reason


def test_a_window_one_row_short_is_a_mismatch_or_a_finding():
    fn, args, reference = scaled_windows("short")
    alone = compare(fn, *args)
    assert not alone.passed, alone.verdict()
    assert "unwritten-output" in {f.code for f in alone.findings}
    against = compare(fn, *args, reference=reference)
    assert against.complete and not against.allclose, against.verdict()


def test_a_body_that_reads_past_its_window_is_a_mismatch():
    fn, args, reference = segment_sums("whole-block")
    result = compare(fn, *args, reference=reference)
    assert result.complete and not result.allclose, result.verdict()

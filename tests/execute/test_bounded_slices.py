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
from pallaslab.model._jax.traced_size_copies import NOTE as TRACED_NOTE

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


# --- a 2-D grid over windows and lane blocks, scratch carried, the output aliased ------------

def _accumulate_kernel(starts_ref, sizes_ref, x_ref, y_ref, o_ref, steps_ref):
    del starts_ref, sizes_ref

    @pl.when(pl.program_id(1) == 0)
    def _():
        steps_ref[...] = jnp.zeros_like(steps_ref)

    steps_ref[...] += 1.0  # 1 in the first lane block of each window, 2 in the second
    o_ref[...] = x_ref[...] + y_ref[...] * steps_ref[...]


def windows_by_lanes(mutant: str | None = None):
    del mutant
    spec = pl.BlockSpec((pl.BoundedSlice(BOUND), LANES),
                        lambda i, j, starts, sizes: (pl.ds(starts[i], sizes[i]), j))

    def fn(x, y):
        return pl.pallas_call(
            _accumulate_kernel,
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=2, grid=(len(STARTS), 2), in_specs=[spec, spec],
                out_specs=spec, scratch_shapes=[pltpu.VMEM((BOUND, LANES), jnp.float32)]),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), input_output_aliases={3: 0},
        )(jnp.asarray(STARTS), jnp.asarray(SIZES), x, y)

    def reference(x, y):
        return x + y * jnp.repeat(jnp.array([1.0, 2.0]), LANES)[None, :]

    x = jnp.arange(ROWS * 2 * LANES, dtype=jnp.float32).reshape(ROWS, 2 * LANES) / 100.0
    return fn, (x, jnp.ones_like(x) * 0.5), reference


# --- the same windows inside a kernel: pltpu.emit_pipeline over HBM ---------------------------
# emit_pipeline copies each window by a DMA whose size is traced, rounded up to the (8, 128)
# tiling as the TPU pipeline rounds it ("Shapes must be 1D sequences of concrete values" in
# JAX's interpreter): a window one row short still copies its whole tile, so the wrong variant
# leaves a whole tile out.

PIPE_ROWS = 32
PIPE_WINDOWS = np.array([[0, 16], [16, 24], [24, 32]], np.int32)  # [start, end), tile-aligned


def _pipeline_body(x_vmem, o_vmem):
    o_vmem[...] = x_vmem[...] * 2.0 + 1.0


def _pipelined(x_hbm, windows_hbm, o_hbm, windows_smem):
    pltpu.sync_copy(windows_hbm, windows_smem)

    def index_map(i):
        start = windows_smem[i, 0]
        return (pl.ds(start, windows_smem[i, 1] - start), 0)

    spec = pl.BlockSpec((pl.BoundedSlice(16), LANES), index_map)
    pltpu.emit_pipeline(_pipeline_body, grid=(len(PIPE_WINDOWS),), in_specs=[spec],
                        out_specs=spec)(x_hbm, o_hbm)


def pipelined_windows(mutant: str | None = None):
    windows = PIPE_WINDOWS.copy()
    if mutant == "short":  # the middle window ends a tile early: rows 16-23 never copied
        windows[1, 1] = 16
    anywhere = pl.BlockSpec(memory_space=pl.ANY)

    def fn(x):
        return pl.pallas_call(
            _pipelined, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[anywhere, anywhere], out_specs=anywhere,
            scratch_shapes=[pltpu.SMEM(windows.shape, jnp.int32)])(x, jnp.asarray(windows))

    x = jnp.arange(PIPE_ROWS * LANES, dtype=jnp.float32).reshape(PIPE_ROWS, LANES) / 100.0
    return fn, (x,), lambda x: x * 2.0 + 1.0


KERNELS = {"scaled_windows": scaled_windows, "segment_sums": segment_sums,
           "windows_by_lanes": windows_by_lanes, "pipelined_windows": pipelined_windows}


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_correct_bounded_slice_kernel_compares_all_close_with_no_executor_named(name):
    fn, args, _ = KERNELS[name]()
    result = compare(fn, *args)
    assert result.allclose and result.passed, result.verdict()
    note = TRACED_NOTE if name == "pipelined_windows" else NOTE
    ours = [r for r in result.results if r.ran_as == "interpret"]
    assert ours and all(r.status == "ran" and note in r.notes for r in ours)


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


def test_vectorized_hands_a_window_to_the_interpreter_by_a_named_rule():
    fn, args, reference = scaled_windows()
    result = run(fn, *args, executor="vectorized")
    assert result.status == "ran", result.reason
    np.testing.assert_allclose(result.outputs[0], reference(*args), rtol=1e-6)
    (batching,) = result.batching
    assert (batching.how, batching.rule) == (
        "interpreted", "a pl.BoundedSlice window: each step's block is as tall as its window, "
        "which one batched array cannot hold")
    assert NOTE in result.notes and not any("could not batch" in n for n in result.notes)


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


def test_a_pipelined_window_a_tile_short_is_a_mismatch():
    fn, args, reference = pipelined_windows("short")
    result = compare(fn, *args, reference=reference)
    assert result.complete and not result.allclose, result.verdict()

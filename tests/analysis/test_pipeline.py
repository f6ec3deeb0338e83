"""The TPU pipeline model: exact event times on a hand-checkable grid, real kernels, what-if."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from kernels import CATALOG, matmul

import pallaslab
from pallaslab.analysis.chips import chip
from pallaslab.analysis.pipeline import (
    COMPUTE,
    COPY_IN,
    WRITE_BACK,
    PipelineError,
    pipeline,
    simulate,
)
from pallaslab.analysis.whatif import what_if

S = jax.ShapeDtypeStruct


def test_four_step_grid_exact_event_times():
    # copy-in 2 per step; compute 3, 1, 3, 1; an output block written back after steps 1, 3.
    events, summary, start = simulate([2, 2, 2, 2], [3, 1, 3, 1], [0, 1, 0, 1])
    # A0 = 2; A1 = max(2+3, 2+2) = 5; A2 = max(5+1, 5+2, 2+3+0) = 7; A3 = max(7+3, 7+2, 5+1+1) = 10
    assert start.tolist() == [2, 5, 7, 10]

    def lane(kind):
        sel = events.kind == kind
        return list(zip(events.program[sel].tolist(), events.start[sel].tolist(),
                        events.end[sel].tolist(), strict=True))

    assert lane(COPY_IN) == [(0, 0, 2), (1, 2, 4), (2, 5, 7), (3, 7, 9)]
    assert lane(COMPUTE) == [(0, 2, 5), (1, 5, 6), (2, 7, 10), (3, 10, 11)]
    assert lane(WRITE_BACK) == [(1, 6, 7), (3, 11, 12)]
    assert summary.predicted_time == 12
    assert summary.compute_time == 8 and summary.exposed_copy_time == 4
    assert summary.compute_bound_fraction == pytest.approx(8 / 12)
    assert (summary.stall_step, summary.first_stall_step) == (2, 2)


def test_single_buffered_copies_do_not_overlap():
    _, _, start = simulate([1, 1], [2, 2], [0, 0], serial_in=[False, True])
    assert start.tolist() == [1, 4]  # step 1's copy waits for step 0's compute
    _, double, _ = simulate([1, 1], [2, 2], [0, 0])
    assert double.predicted_time == 5
    _, _, start = simulate([0, 0, 0], [1, 1, 1], [3, 3, 3], serial_out=[True] * 3)
    assert start.tolist() == [0, 4, 8]  # each compute waits for the previous write-back
    _, _, start = simulate([0, 0, 0], [1, 1, 1], [3, 3, 3])
    assert start.tolist() == [0, 1, 4]  # two output slots: waits for the write-back before


def test_copy_bound_kernel_from_tiling_and_chip_facts():
    fn, args = CATALOG["elementwise_1d"].case()  # 8 steps of 1024 f32 in, 1024 f32 out
    k = pallaslab.capture(fn, *args)[0]
    p = pipeline(k, "v5e", step_overhead=0.0)
    v5e = chip("v5e")
    copy = 1024 * 4 / v5e.hbm_bandwidth
    # one multiply per element, from the kernel jaxpr: elementwise work runs on the VPU
    compute = 1024 / v5e.vpu_ops
    assert p.summary.hbm_bytes == 2 * 8192 * 4
    assert p.summary.flops == 8192
    # Copy-bound: each step waits for its copy; the last write-back ends the kernel.
    assert p.summary.predicted_time == pytest.approx(8 * copy + compute + copy)
    assert p.summary.first_stall_step == 1
    assert len(p.events) == 8 * 3


def test_revisited_blocks_are_not_copied_again():
    fn, args = CATALOG["matmul_f32"].case()  # grid (4, 3, 2): output block fixed over k
    p = pipeline(pallaslab.capture(fn, *args)[0], "v6e")
    wb = p.events.program[p.events.kind == WRITE_BACK]
    assert wb.tolist() == list(range(1, 24, 2))  # after the last k step of every (i, j)
    ce = pallaslab.capture(fn, *args)[0]
    assert p.summary.flops == pytest.approx(24 * (2 * 128**3 + 128 * 128))
    assert p.summary.predicted_time > 0 and ce.cost_estimate is None


def test_user_cost_estimate_wins():
    from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

    bs = BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)
    k = pallaslab.capture(functools.partial(flash_attention, block_sizes=bs),
                          *(S((1, 2, 512, 128), jnp.bfloat16),) * 3)[0]
    p = pipeline(k, "v5e")
    assert p.summary.flops == pytest.approx(k.cost_estimate.flops)


def test_million_steps_aggregate():
    rng = np.random.default_rng(0)
    n = 1 << 16
    events, summary, _ = simulate(rng.random(n), rng.random(n), rng.random(n))
    assert len(events) == 3 * n and summary.steps == n
    from pallaslab.analysis.pipeline import Pipeline

    p = Pipeline("k", "v5e", events, summary, compute_start=np.zeros(n))
    agg = p.aggregate(bins=64)
    busy = agg["busy"]
    assert busy.shape == (3, 64)
    assert busy[COMPUTE].sum() == pytest.approx(summary.compute_time)


def test_pipeline_needs_a_tiling():
    fn, args = CATALOG["gpu_mesh_kernel"].case()
    k = pallaslab.capture(fn, *args)[0]
    with pytest.raises(PipelineError, match="mesh kernels"):
        pipeline(k, "v5e")


def test_what_if_ranks_a_too_large_block_as_not_fitting():
    x = S((4096, 4096), jnp.float32)

    def make(b):
        if b == 100:
            raise ValueError("block 100 does not divide 4096")
        return functools.partial(matmul, bm=b, bk=b, bn=b), (x, x)

    table = what_if(make, [2048, 128, 100, 512], chips=("v5e", "v6e"))
    order = [r.block_sizes for r in table.rows]
    assert order[:2] == [512, 128]  # both fit; 512 needs fewer copies, so it is faster
    assert order[2] == 2048 and not table.rows[2].fits
    assert table.rows[2].chip("v5e").vmem_bytes == 7 * 2048 * 2048 * 4
    assert table.rows[3].error == "block 100 does not divide 4096"
    assert table.best.block_sizes == 512
    r = table.rows[0]
    assert r.fetches is not None and r.hbm_bytes > 0 and not math.isnan(r.worst_time)
    assert "512" in str(table)

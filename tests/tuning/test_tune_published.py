"""`benchmarks/bench_tune_published.py`'s reading of where tune puts a published winner (its
rank, ties against the model, a winner ruled out counted as a false out), on problems written
here; and tune's time for a grouped matmul (tokamax's ragged dot) counts its nested pipeline."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("tokamax")

from pallaslab.analysis import published as pub
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.tuning import Candidate, ChipEstimate, TuneResult

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_tune_published.py"
_spec = importlib.util.spec_from_file_location("bench_tune_published", _PATH)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules.setdefault(_spec.name, bench)
_spec.loader.exec_module(bench)

LSCE = "pallas_mosaic_tpu_linear_softmax_cross_entropy_loss"
IRONWOOD = "TPU7x(Ironwood, 1 JAX device)"
LSCE_PROBLEM = ('x="f32[1024,512]"; labels="i32[1024]"; w="bf16[512,2048]"; '
                'reduction="mean"; return_residuals=false')


def _row(config: dict[str, int], problem: str = LSCE_PROBLEM, op: str = LSCE,
         median_s: float = 1e-4) -> pub.Row:
    return pub.Row(IRONWOOD, op, problem, json.dumps(config), median_s, (median_s,), line=2)


def _candidate(config: dict[str, int], time: float | None, reason: str | None = None
               ) -> Candidate:
    return Candidate(config, (ChipEstimate("7x", reason is None, 0, 1, time, "compute",
                                           "pipeline"),), reason=reason)


def _result(*candidates: Candidate) -> TuneResult:
    ins = sorted((c for c in candidates if not c.out), key=lambda c: c.time("7x"))
    return TuneResult(("7x",), (), ("b",), tuple(ins) + tuple(c for c in candidates if c.out))


def test_the_winners_rank_counts_ties_against_the_model() -> None:
    result = _result(_candidate({"b": 1}, 1.00e-4), _candidate({"b": 2}, 1.01e-4),
                     _candidate({"b": 3}, 1.50e-4), _candidate({"b": 4}, 2.0e-4),
                     _candidate({"b": 5}, None, reason="does not fit 7x"))
    # b=2 is second by prediction; b=1 is within 2% of it, so it counts above: rank 2.
    second = bench.outcome(_row({"b": 2}, median_s=2e-4), result)
    assert (second.rank, second.candidates, second.outs) == (2, 5, 1)
    assert second.ratio == pytest.approx(0.5)  # tune's pick (b=1) over the winner's time
    # b=1 is first, and b=2 within 2% of it counts above it too: ties go against the model.
    assert bench.outcome(_row({"b": 1}), result).rank == 2
    assert bench.outcome(_row({"b": 4}), result).rank == 4
    # The table's key order does not matter.
    assert bench.config_key('{"y": 1, "x": 2}') == bench.config_key({"x": 2, "y": 1})


def test_a_winner_ruled_out_is_a_false_out() -> None:
    result = _result(_candidate({"b": 1}, 1e-4),
                     _candidate({"b": 5}, None, reason="does not fit 7x"))
    outcomes = [bench.outcome(_row({"b": 5}), result), bench.outcome(_row({"b": 1}), result)]
    assert outcomes[0].false_out and outcomes[0].reason == "does not fit 7x"
    assert not outcomes[1].false_out and outcomes[1].rank == 1
    line = bench.final_line(outcomes)
    assert line == "tune-published: 2 problems, winner in top-3 50%, top-5 50%, false outs 1"
    assert "false outs 1/2 out" in bench.summary(outcomes)


def test_published_rows_are_tuned_and_read() -> None:
    """Two problems of one op written here: the space is their distinct configs; a config that
    does not divide the problem is out at capture; the one winner that is out is counted."""
    good = {"b_block_size": 512, "h_block_size": 512, "v_block_size": 1024}
    other = {"b_block_size": 1024, "h_block_size": 256, "v_block_size": 512}
    bad = {"b_block_size": 1024, "h_block_size": 512, "v_block_size": 3000}
    rows = [_row(good), _row(other), _row(bad, problem=LSCE_PROBLEM.replace("1024", "2048"))]
    space = bench.spaces(rows)[(LSCE, IRONWOOD)]
    assert space == [good, other, bad]
    assert [r.line for r in bench.sample(rows, 1)] == [2]
    result, batch = bench.tune_row(rows[0], space)
    assert batch == 1
    won = bench.outcome(rows[0], result)
    assert won.rank in (1, 2) and won.outs == 1 and won.ratio is not None and won.ratio > 0
    lost = bench.outcome(_row(bad), result)
    assert lost.false_out and "capture failed" in (lost.reason or "")


def test_a_grouped_matmul_is_timed_by_its_nested_pipeline() -> None:
    """tokamax's ragged dot keeps the matmul in an in-kernel pipeline: tune's time is at least
    the MXU's time for the product (its outer grid alone predicted microseconds)."""
    problem = ("lhs=bf16[8192,2048] rhs=bf16[8,2048,1024] dot_dims=[[[1], [1]], [[], []]] "
               "group_sizes=uniform-multinomial(num_groups=8;total=8192;numpy seed0) "
               "return_residuals=False activation=None")
    config = {"tile_m": 512, "tile_k": 1024, "tile_n": 512, "input_buffer_count": 2,
              "combine_scopes": False}
    row = _row(config, problem, "pallas_mosaic_tpu_ragged_dot")
    result, _ = bench.tune_row(row, [config])
    best = result.best
    assert best is not None and best.chip("7x").model == "pipeline"
    mxu = 2 * 8192 * 2048 * 1024 / get_chip("7x").bf16_flops
    assert best.time("7x") >= mxu


def test_the_winners_percentile_best_tenth_and_pruning() -> None:
    """Twenty candidates, two ruled out: 18 kept, the best 10% is the top 2 (ceil(1.8)); ties
    within 2% count against the model; a winner ruled out is at the 100th percentile."""
    times = {b: (1 + b / 10) * 1e-4 for b in range(18)}
    result = _result(*(_candidate({"b": b}, t) for b, t in times.items()),
                     _candidate({"b": 18}, None, reason="does not fit 7x"),
                     _candidate({"b": 19}, None, reason="does not fit 7x"))
    first = bench.outcome(_row({"b": 0}), result, space=200)
    assert (first.rank, first.kept, first.best) == (1, 18, 2)
    assert first.in_best and first.percentile == pytest.approx(100 / 18)
    # 200 configs, 90% of them kept (as in the candidates): the best 10% is 18 of them.
    assert first.pruning == pytest.approx(200 / 18)
    third = bench.outcome(_row({"b": 2}), result)
    assert third.rank == 3 and not third.in_best and third.percentile == pytest.approx(300 / 18)
    assert third.pruning == pytest.approx(20 / 2)  # no space given: the candidates are it
    out = bench.outcome(_row({"b": 18}), result)
    assert out.false_out and not out.in_best and out.percentile == 100.0
    # a tie: b=1 within 2% of b=0 (1.0e-4 vs 1.01e-4) puts b=0 second, still in the best 2.
    tied = _result(_candidate({"b": 0}, 1.0e-4), _candidate({"b": 1}, 1.01e-4),
                   *(_candidate({"b": b}, b * 1e-4) for b in range(2, 20)))
    assert bench.outcome(_row({"b": 0}), tied).rank == 2
    outcomes = [first, third, out]
    line = bench.tune_line(outcomes)
    assert line == "tune: 3 rows, winner in best 10% 33%, median percentile 17, pruning 10.0x"
    assert "winner in best 10%  33%" in bench.space_summary(outcomes)


def test_a_sampled_space_keeps_the_winner() -> None:
    space = [{"b": b} for b in range(50)]
    tuned = bench.capped(space, {"b": 7}, 10, seed=3)
    assert len(tuned) == 10 and tuned[0] == {"b": 7} and tuned.count({"b": 7}) == 1
    assert tuned == bench.capped(space, {"b": 7}, 10, seed=3)  # seeded
    assert bench.capped(space, {"b": 99}, 0, seed=3)[0] == {"b": 99}  # added when missing
    assert len(bench.capped(space, {"b": 7}, 0, seed=3)) == 50  # 0: the whole space


def test_tokamax_space_is_enumerated_for_the_rows_chip() -> None:
    """tokamax's LSCE space asks `pltpu.get_tpu_info()`, which fails on a CPU: it is
    enumerated under the row's chip; the winner comes back with the space's defaults filled."""
    space, winner = bench.tokamax_space(_row({"b_block_size": 1024, "h_block_size": 512,
                                              "v_block_size": 1024}))
    assert winner == {"b_block_size": 1024, "h_block_size": 512, "v_block_size": 1024,
                      "buffer_count": [2, 2]}
    assert len(space) > 3 and all(c["h_block_size"] % 128 == 0 for c in space)
    assert bench.config_key(winner) in {bench.config_key(c) for c in space}


def test_a_json_array_in_a_config_is_a_tuple() -> None:
    """tokamax hashes its configs: LSCE's `buffer_count` from JSON must be a tuple."""
    row = _row({"b_block_size": 1024, "h_block_size": 512, "v_block_size": 1024,
                "buffer_count": [3, 2]})
    assert pub.config(row)["buffer_count"] == (3, 2)


def test_a_row_is_placed_in_its_tokamax_space() -> None:
    """A small LSCE problem written here, its whole tokamax space tuned (cap 0) and sampled
    (cap 3): the winner is ranked among the candidates the model keeps."""
    row = _row({"b_block_size": 1024, "h_block_size": 512, "v_block_size": 1024})
    whole = bench.place(row, 0)
    assert isinstance(whole, bench.Outcome) and whole.in_space
    assert whole.candidates == whole.space > 3 and whole.rank is not None
    assert 0 < whole.percentile <= 100 and whole.pruning >= 1
    sampled = bench.place(row, 3)
    assert isinstance(sampled, bench.Outcome)
    assert (sampled.candidates, sampled.space) == (3, whole.space)


def test_twins_the_model_cannot_tell_apart_put_a_winner_beyond_it() -> None:
    """Configs predicted exactly alike (they differ only in what the model does not see) are
    the winner's twins; where they alone fill the best 10%, the row is beyond the model."""
    twins = _result(_candidate({"b": 0, "layout": 1}, 1e-4),
                    _candidate({"b": 0, "layout": 2}, 1e-4),
                    *(_candidate({"b": b}, b * 1e-4) for b in range(2, 10)))
    o = bench.outcome(_row({"b": 0, "layout": 2}), twins)
    assert (o.rank, o.twins, o.best) == (2, 1, 1) and o.beyond_model and not o.in_best
    near = _result(_candidate({"b": 0}, 1e-4), _candidate({"b": 1}, 1.01e-4),
                   *(_candidate({"b": b}, b * 1e-4) for b in range(2, 10)))
    o = bench.outcome(_row({"b": 0}), near)  # within 2% is a tie, not a twin
    assert (o.rank, o.twins) == (2, 0) and not o.beyond_model
    assert "beyond the model 0" in bench.space_summary([o])


def test_the_winners_block_sizes_rank_among_distinct_block_sizes() -> None:
    """Configs differing only in a layout are one block size, at their best time: the winner's
    block sizes can lead where its layout twins fill the best 10% of the configs."""
    result = _result(_candidate({"block": 0, "layout": 1}, 1.00e-4),
                     _candidate({"block": 0, "layout": 2}, 1.00e-4),
                     _candidate({"block": 1, "layout": 1}, 1.01e-4),
                     *(_candidate({"block": b, "layout": 1}, b * 1e-4) for b in range(2, 12)))
    o = bench.outcome(_row({"block": 0, "layout": 2}), result)
    assert (o.rank, o.best) == (3, 2) and not o.in_best  # its twin and a near tie above it
    assert (o.block_rank, o.block_sizes) == (2, 12)  # block 1 is within 2%: counted above
    assert o.in_best_blocks and o.block_percentile == pytest.approx(100 * 2 / 12)
    alone = bench.outcome(_row({"block": 5, "layout": 1}), result)
    assert (alone.block_rank, alone.in_best_blocks) == (6, False)
    assert bench.blocks_line([o, alone]) == (
        "tune-blocks: 2 rows, winner's block sizes in best 10% 50%, median percentile 33")
    assert bench.block_sizes_of({"b": 1, "layout": 2}) == bench.config_key({"b": 1, "layout": 2})

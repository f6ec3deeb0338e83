"""The figure lines `bench_tune_published.py` prints over its outcomes (each an `Outcome` of
that script: where tune put one published winner)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

Outcome = Any  # bench_tune_published.Outcome


def summary(outcomes: Sequence[Outcome]) -> str:
    """One line of figures over `outcomes`."""
    n = len(outcomes)
    if not n:
        return "no problems"
    ranks = [o.rank for o in outcomes if o.rank is not None]
    ratios = [o.ratio for o in outcomes if o.ratio is not None]
    false_outs = sum(o.false_out for o in outcomes)
    outs = sum(o.outs for o in outcomes)

    def median(values: Sequence[float], form: str) -> str:
        return format(statistics.median(values), form) if values else "  -"

    sizes = [o.candidates for o in outcomes]
    parts = [f"problems {n:3d}", f"configs/problem {median(sizes, '4.0f')}",
             f"median rank {median(ranks, '4.1f')}",
             *(f"top{k} {sum(r <= k for r in ranks) / n:4.0%}" for k in (1, 3, 5)),
             f"false outs {false_outs}/{outs} out", f"pick/published {median(ratios, '5.2f')}"]
    return "  ".join(parts)


def final_line(outcomes: Sequence[Outcome]) -> str:
    n = len(outcomes)
    ranks = [o.rank for o in outcomes if o.rank is not None]
    top3 = sum(r <= 3 for r in ranks) / n if n else 0.0
    top5 = sum(r <= 5 for r in ranks) / n if n else 0.0
    false_outs = sum(o.false_out for o in outcomes)
    return (f"tune-published: {n} problems, winner in top-3 {top3:.0%}, top-5 {top5:.0%}, "
            f"false outs {false_outs}")


def space_summary(outcomes: Sequence[Outcome]) -> str:
    """One line of figures over `outcomes` of tokamax's spaces."""
    n = len(outcomes)
    if not n:
        return "no rows"
    med = statistics.median
    return "  ".join([
        f"rows {n:3d}", f"space/row {med(o.space or o.candidates for o in outcomes):4.0f}",
        f"tuned/row {med(o.candidates for o in outcomes):3.0f}",
        f"winner in best 10% {sum(o.in_best for o in outcomes) / n:4.0%}",
        f"median percentile {med(o.percentile for o in outcomes):5.1f}",
        f"pruning {med(o.pruning for o in outcomes):4.1f}x",
        f"false outs {sum(o.false_out for o in outcomes)}",
        f"winner not in space {sum(not o.in_space for o in outcomes)}",
        f"beyond the model {sum(o.beyond_model for o in outcomes)}",
        f"block sizes in best 10% {sum(o.in_best_blocks for o in outcomes) / n:4.0%}"])


def blocks_line(outcomes: Sequence[Outcome]) -> str:
    """The winner's block sizes among the distinct block sizes: what a kernel author tries
    first, the configs differing only in flags the model cannot see (layouts, a scheduler)
    taken as one."""
    n = len(outcomes)
    share = sum(o.in_best_blocks for o in outcomes) / n if n else 0.0
    pct = statistics.median(o.block_percentile for o in outcomes) if n else 100.0
    return (f"tune-blocks: {n} rows, winner's block sizes in best 10% {share:.0%}, "
            f"median percentile {pct:.0f}")


def tune_line(outcomes: Sequence[Outcome]) -> str:
    n = len(outcomes)
    share = sum(o.in_best for o in outcomes) / n if n else 0.0
    pct = statistics.median(o.percentile for o in outcomes) if n else 100.0
    pruning = statistics.median(o.pruning for o in outcomes) if n else 0.0
    return (f"tune: {n} rows, winner in best 10% {share:.0%}, median percentile {pct:.0f}, "
            f"pruning {pruning:.1f}x")

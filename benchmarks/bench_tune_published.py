"""`pallaslab.tune` against the configs tokamax's device autotuner picked (issue 40 item 4).

For a sample of TPU problems of the published autotuning table (per op and chip the first
`--per-group` problems), the candidate space is every distinct config the table holds for that
op and chip (configs that do not suit the problem drop out at capture, with their reason).
`pallaslab.tune` ranks them by the model for the row's chip (no compile, nothing runs), and the
published winner's place is read off: its rank among the configs in (a config predicted within
2% of the winner counts as ranked above it), or a false out when tune rules the winner out.

Prints per op and chip: problems, candidates per problem, median rank of the winner, the share
of problems with the winner in the top 1 / 3 / 5, the false outs (winner ruled out) over all
configs ruled out, the median predicted time of tune's pick over the winner's published time;
then `tune-published: P problems, winner in top-3 X%, top-5 Y%, false outs Z`.

Run: JAX_PLATFORMS=cpu nice -n 10 .venv/bin/python benchmarks/bench_tune_published.py
     [CSV] [--per-group N] [--op OP] [--chip CHIP]       (about 5 minutes on 2 busy cores)
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from pallaslab.analysis import published as pub
from pallaslab.tuning import TuneResult

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared/published/tokamax_autotune_pallas.csv"
TIE = 0.02  # a candidate predicted within 2% of the winner counts as ranked above it


def config_key(config: Any) -> str:
    """One text per config, whatever its key order (a dict or the table's JSON text)."""
    return json.dumps(json.loads(config) if isinstance(config, str) else config, sort_keys=True)


def spaces(rows: Iterable[pub.Row]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(op_file, hardware) -> the distinct configs the table holds for it, in table order."""
    out: dict[tuple[str, str], dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for row in rows:
        out[(row.op_file, row.hardware)].setdefault(config_key(row.config), json.loads(row.config))
    return {k: list(v.values()) for k, v in out.items()}


def sample(rows: Sequence[pub.Row], per_group: int) -> list[pub.Row]:
    """The first `per_group` distinct problems of each (op, chip), one group after another."""
    seen: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    out = []
    for row in pub.round_robin(list(rows)):
        problems = seen[(row.op_file, row.hardware)]
        if row.problem not in problems and len(problems) < per_group:
            problems.add(row.problem)
            out.append(row)
    return out


def tune_row(row: pub.Row, space: Sequence[dict[str, Any]]) -> tuple[TuneResult, int]:
    """`pallaslab.tune` over `space` for the row's problem, on the row's chip, model only; and
    the batch size its times are for one element of (attention rows are tuned, as
    `published.predict` models them, for one batch element with concrete zeros, so the mask's
    block-sparse grid is evaluated; the batch is an outer parallel dimension)."""
    import tokamax

    from pallaslab.model import capture
    from pallaslab.tuning import tune_captures

    batch = 1

    def capture_of(config: dict[str, Any]) -> Any:
        nonlocal batch
        built = pub.build(dataclasses.replace(row, config=json.dumps(config)))
        args, batch = pub.batch_of_one(row, built.args)
        with tokamax.config.cross_compile(True):  # trace TPU kernels on this CPU host
            return capture(built.fn, *args, chip=row.chip)

    return tune_captures(capture_of, space, chip=row.chip, compile_top=0), batch


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Where tune put the published winner of one problem."""

    row: pub.Row
    candidates: int
    outs: int  # configs tune ruled out (the winner among them when `rank` is None)
    rank: int | None  # the winner's rank, ties against it; None: tune ruled it out
    ratio: float | None  # predicted time of tune's pick / the winner's published time
    reason: str | None = None  # why the winner is out

    @property
    def false_out(self) -> bool:
        return self.rank is None


def outcome(row: pub.Row, result: TuneResult, batch: int = 1) -> Outcome:
    """The published winner's place in `result` (tuned for `row.chip`; its times are for one
    of `batch` elements)."""
    chip = row.chip or ""
    key = config_key(row.config)
    winner = next((c for c in result.candidates if config_key(c.config) == key), None)
    if winner is None:
        raise ValueError(f"line {row.line}: the winner {row.config} is not in the tuned space")
    best = result.top(1, chip)
    ratio = best[0].time(chip) * batch / row.median_s if best else None
    outs = sum(c.out for c in result.candidates)
    if winner.out:
        return Outcome(row, len(result.candidates), outs, None, ratio, winner.reason)
    limit = winner.time(chip) * (1 + TIE)
    above = sum(1 for c in result.ranked if c is not winner and c.time(chip) < limit)
    return Outcome(row, len(result.candidates), outs, above + 1, ratio)


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", help="the published table (default: "
                    "$PALLASLAB_PUBLISHED_TIMINGS, else ../shared/published/...)")
    for flag, what in (("--op", "only this op (e.g. ragged_dot)"),
                       ("--chip", "only this chip (e.g. 7x)")):
        ap.add_argument(flag, default="", help=what)
    ap.add_argument("--per-group", type=int, default=1, help="problems per op and chip")
    args = ap.parse_args()
    table = args.csv or os.environ.get("PALLASLAB_PUBLISHED_TIMINGS") or str(DEFAULT_CSV)
    rows = [r for r in pub.tpu_rows(pub.read_rows(table)) if r.op
            and args.op in ("", r.op) and args.chip in ("", r.chip)]
    space_of = spaces(rows)
    picked = sample(rows, args.per_group)
    print(f"{len(picked)} problems from {len(rows)} TPU rows; space: the table's distinct configs "
          f"per op and chip; model only, ties within {TIE:.0%} against the model")
    start = time.perf_counter()
    groups: dict[tuple[str, str], list[Outcome]] = collections.defaultdict(list)
    failed: collections.Counter[str] = collections.Counter()
    for row in picked:
        try:
            result, batch = tune_row(row, space_of[(row.op_file, row.hardware)])
        except pub.BuildError as err:
            failed[err.reason] += 1
            continue
        o = outcome(row, result, batch)
        groups[(row.op or "", row.chip or "")].append(o)
        where = f"rank {o.rank}" if o.rank is not None else f"OUT ({(o.reason or '')[:90]})"
        print(f"  line {row.line:4d} {row.op:<20} {row.chip:<4} {o.candidates:3d} configs, "
              f"{o.outs:3d} out, winner {where}", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")
    for (op, chip), outs in sorted(groups.items()):
        print(f"{op:<20} {chip:<4} {summary(outs)}")
    every = [o for outs in groups.values() for o in outs]
    print(f"{'all':<25} {summary(every)}")
    for reason, count in failed.most_common():
        print(f"not tuned: {count} x {reason}")
    print(final_line(every))
    return 0


if __name__ == "__main__":
    sys.exit(main())

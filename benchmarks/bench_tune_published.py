"""`pallaslab.tune` against the configs tokamax's device autotuner picked (issue 40 item 4).

`--spaces tokamax` (the default): for a sample of TPU rows of the published autotuning table
(per op and chip the first `--per-group` problems, 12 by default: 108 rows over every op and
chip), the candidates are tokamax's own autotuning search space for the row's problem
(`op.bind(...).autotuning_configs`, enumerated under the row's chip's abstract TPU: the LSCE
spaces ask `pltpu.get_tpu_info()`, as `capture(chip=)` answers it). A space is sampled to at most
`--cap` candidates (the published winner and a seeded sample of the rest; 0: all), each tuned
by the model alone for the row's chip (no libtpu: the configs it would refuse are estimated by
the model's VMEM fit and ruled out). The winner's rank counts ties against the model (a
candidate predicted within 2% of it ranks above it); a winner ruled out is at the 100th
percentile. Prints per row, then per op and chip and over all: the share of rows whose winner is
in the model's best 10% of the candidates it keeps (ceil(10%), at least one), the median
percentile rank (rank / candidates kept), the pruning factor (the whole space over its best 10%,
the kept share estimated from the candidates tuned), and the rows beyond the model (the
winner's twins, candidates it predicts exactly as the winner since they differ only in what it
does not model, fill the best 10% alone), and where the winner's block sizes (its parameters
naming a block or tile size) rank among the distinct block sizes kept, each at its best
predicted time (what a kernel author tries first: configs differing only in layouts or
scheduler flags taken as one); then `tune-blocks: N rows, winner's block sizes in best 10% P%,
median percentile Q` and `tune: N rows, winner in best 10% P%, median percentile Q, pruning Fx`.

`--spaces table`: the candidate space is every distinct config the table holds for that op and
chip; prints the rank of the winner (top 1 / 3 / 5, false outs) and
`tune-published: P problems, winner in top-3 X%, top-5 Y%, false outs Z`.

Run: JAX_PLATFORMS=cpu nice -n 10 .venv/bin/python benchmarks/bench_tune_published.py
     [CSV] [--spaces tokamax|table] [--per-group N] [--cap N] [--jobs N] [--op OP] [--chip CHIP]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import json
import math
import multiprocessing
import os
import random
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however loaded

from _tune_lines import (
    blocks_line,
    final_line,
    space_summary,
    summary,
    tune_line,
)

from pallaslab.analysis import published as pub
from pallaslab.tuning import TuneResult

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared/published/tokamax_autotune_pallas.csv"
TIE = 0.02  # a candidate predicted within 2% of the winner counts as ranked above it
BEST = 0.10  # the share of the kept candidates the model would hand to the device


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


def _config_dict(config: Any) -> dict[str, Any]:
    """A tokamax Config as the table writes it: its fields, enums as their values, tuples as
    lists (so it goes through JSON and back into the op's Config)."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        value = getattr(value, "value", value)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def _bound(row: pub.Row) -> Any:
    """tokamax's op for the row (its config the row's) bound to the row's arguments (shapes
    only), whose `autotuning_configs` is the search space tokamax's autotuner measures."""
    import jax
    from tokamax.ops import tpu

    arrays = pub.problem_arrays(row.problem)
    cfg = pub.config(row)
    if row.op == "ragged_dot":
        lhs, rhs = pub.need(arrays, "lhs", "rhs")
        op = tpu.RaggedDot(config=tpu.RaggedDotConfig(**cfg), bypass_device_check=True)
        groups = jax.ShapeDtypeStruct((rhs[0][0],), "int32")
        return op.bind(pub.sds(lhs), pub.sds(rhs), group_sizes=groups,
                       ragged_dot_dimension_numbers=pub.ragged_dot_dims(row.problem))
    if row.op in ("lsce", "lsce_vjp"):
        x, labels, w = (pub.sds(a) for a in pub.need(arrays, "x", "labels", "w"))
        op = tpu.LinearSoftmaxCrossEntropyLoss(
            config=tpu.LinearSoftmaxCrossEntropyLossConfig(**cfg), bypass_device_check=True)
        reduction = pub.field(row.problem, "reduction") or "sum"
        if row.op == "lsce":
            return op.bind(x, labels, w, reduction=reduction)
        scalar = jax.ShapeDtypeStruct((), "float32")
        lse = jax.ShapeDtypeStruct(labels.shape, "float32")
        return op.vjp.bind((lse,), scalar, scalar, x, labels, w, reduction=reduction)
    if row.op == "flash_attention":
        q, k, v = (pub.sds(a) for a in pub.need(arrays, "q", "k", "v"))
        op = tpu.FlashAttention(config=tpu.FlashAttentionConfig(**cfg), bypass_device_check=True)
        return op.bind(q, k, v, is_causal=pub.flag(row.problem, "causal"))
    if row.op == "flash_attention_vjp":
        built = pub.build(row)
        r0, r1, out, dout, q, k, v = built.args[:7]
        from tokamax._src.ops.attention import pallas_mosaic_tpu_vjp as vjp_mod

        op = vjp_mod.PallasMosaicTpuFlashAttentionVjp(config=vjp_mod.Config(**cfg),
                                                       bypass_device_check=True)
        from tokamax._src.ops.attention import base as attn_base

        scale = float(pub.field(row.problem, "logits_scale") or 1.0 / math.sqrt(q.shape[-1]))
        preset = jax.lax.DotAlgorithmPreset.DEFAULT
        return op.bind((r0, r1), out, dout, q, k, v, precision=(preset, preset),
                       logits_dtype=np.dtype(np.float32), logits_scale=scale, bias=None,
                       logits_soft_cap=None, dropout_mask=None,
                       mask=attn_base.Mask(None, is_causal=pub.flag(row.problem, "is_causal")),
                       dropout_rate=0.0, paging_info=None, q_indices=None, k_indices=None,
                       normalize_output=True)
    raise pub.BuildError("op not supported", f"{row.op_file!r}")


def tokamax_space(row: pub.Row) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """tokamax's autotuning search space for the row's problem on the row's chip (its spaces
    ask `pltpu.get_tpu_info()`: enumerated under the chip's abstract TPU, as `capture(chip=)`
    traces), sorted; and the published winner as a config of that space (defaults filled)."""
    from pallaslab.model._jax.trace import abstract_tpu

    try:
        with abstract_tpu(row.chip):
            bound = _bound(row)
            space = bound.autotuning_configs
    except pub.BuildError:
        raise
    except Exception as err:  # tokamax rejects the problem or the config
        raise pub.BuildError(f"no tokamax space ({type(err).__name__})",
                             f"line {row.line}: {str(err).splitlines()[0][:200]}") from err
    configs = sorted((_config_dict(c) for c in space), key=config_key)
    return configs, _config_dict(bound.op.config)


def capped(space: Sequence[dict[str, Any]], winner: dict[str, Any], cap: int,
           seed: int) -> list[dict[str, Any]]:
    """At most `cap` configs of `space`: the winner and a seeded random sample of the others
    (the whole space when it is no larger); the winner is added when the space lacks it."""
    key = config_key(winner)
    others = [c for c in space if config_key(c) != key]
    if cap and len(others) + 1 > cap:
        others = random.Random(seed).sample(others, cap - 1)
    return [winner, *others]


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
    space: int = 0  # the size of the space the candidates were drawn from (0: the candidates)
    in_space: bool = True  # the winner is one of the space's configs (else it was added)
    twins: int = 0  # other kept candidates the model predicts exactly as the winner
    # The winner's block sizes among the distinct block sizes kept (each at its best
    # predicted time), ties against the model; None: the winner is out.
    block_rank: int | None = None
    block_sizes: int = 0  # distinct block sizes among the kept candidates

    @property
    def beyond_model(self) -> bool:
        """The winner's twins alone fill the best 10%: the configs differ only in what the
        model does not see (a layout, a scheduler flag), so no ordering of its times can put
        the winner there with ties counted against it."""
        return self.rank is not None and self.twins + 1 > self.best

    @property
    def false_out(self) -> bool:
        return self.rank is None

    @property
    def kept(self) -> int:
        """The candidates the model keeps (those it rules out, libtpu's refusals estimated by
        the VMEM fit, are removed from the ranking)."""
        return self.candidates - self.outs

    @property
    def best(self) -> int:
        """The size of the model's best 10% of the candidates it keeps (at least one)."""
        return max(1, math.ceil(BEST * self.kept))

    @property
    def in_best(self) -> bool:
        return self.rank is not None and self.rank <= self.best

    @property
    def percentile(self) -> float:
        """The winner's rank as a percentile of the kept candidates (1 of 100: 1; ruled out:
        100)."""
        return 100.0 if self.rank is None else 100.0 * self.rank / self.kept

    @property
    def in_best_blocks(self) -> bool:
        """The winner's block sizes are in the best 10% of the distinct block sizes."""
        return self.block_rank is not None and \
            self.block_rank <= max(1, math.ceil(BEST * self.block_sizes))

    @property
    def block_percentile(self) -> float:
        return 100.0 if self.block_rank is None else \
            100.0 * self.block_rank / max(1, self.block_sizes)

    @property
    def pruning(self) -> float:
        """The whole space over the best 10% the model would measure: the space's kept share
        estimated from the candidates tuned when the space was sampled."""
        space = self.space or self.candidates
        best = max(1, math.ceil(BEST * space * self.kept / self.candidates))
        return space / best


def outcome(row: pub.Row, result: TuneResult, batch: int = 1,
            winner_config: dict[str, Any] | None = None, space: int = 0,
            in_space: bool = True) -> Outcome:
    """The published winner's place in `result` (tuned for `row.chip`; its times are for one
    of `batch` elements); the winner is `winner_config` where given (the row's config with the
    space's defaults filled), else the row's config."""
    chip = row.chip or ""
    key = config_key(row.config if winner_config is None else winner_config)
    winner = next((c for c in result.candidates if config_key(c.config) == key), None)
    if winner is None:
        raise ValueError(f"line {row.line}: the winner {row.config} is not in the tuned space")
    best = result.top(1, chip)
    ratio = best[0].time(chip) * batch / row.median_s if best else None
    outs = sum(c.out for c in result.candidates)
    if winner.out:
        return Outcome(row, len(result.candidates), outs, None, ratio, winner.reason, space,
                       in_space)
    limit = winner.time(chip) * (1 + TIE)
    above = sum(1 for c in result.ranked if c is not winner and c.time(chip) < limit)
    twins = sum(1 for c in result.ranked
                if c is not winner and math.isclose(c.time(chip), winner.time(chip),
                                                    rel_tol=1e-9))
    block_rank, block_sizes = _block_rank(result, winner, chip)
    return Outcome(row, len(result.candidates), outs, above + 1, ratio, None, space, in_space,
                   twins, block_rank, block_sizes)


BLOCK_PARAMETER = re.compile(r"block|tile")  # a parameter naming a block (or tile) size


def block_sizes_of(config: dict[str, Any]) -> str:
    """The config's block-size parameters (its other parameters, such as layouts and
    scheduler flags, left out), as a key; the whole config when it names none."""
    sizes = {k: v for k, v in config.items() if BLOCK_PARAMETER.search(k)}
    return config_key(sizes or config)


def _block_rank(result: TuneResult, winner: Any, chip: str) -> tuple[int, int]:
    """(rank, count) of the winner's block sizes among the distinct block sizes of the kept
    candidates, each at the best time predicted for it, ties within 2% against the model."""
    best: dict[str, float] = {}
    for c in result.ranked:
        key = block_sizes_of(c.config)
        best[key] = min(best.get(key, math.inf), c.time(chip))
    mine = block_sizes_of(winner.config)
    limit = best[mine] * (1 + TIE)
    return 1 + sum(1 for k, t in best.items() if k != mine and t < limit), len(best)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", help="the published table (default: "
                    "$PALLASLAB_PUBLISHED_TIMINGS, else ../shared/published/...)")
    for flag, what in (("--op", "only this op (e.g. ragged_dot)"),
                       ("--chip", "only this chip (e.g. 7x)")):
        ap.add_argument(flag, default="", help=what)
    ap.add_argument("--spaces", choices=("tokamax", "table"), default="tokamax",
                    help="tokamax: tokamax's autotuning space of each row's problem; table: "
                    "the distinct configs the table holds per op and chip")
    ap.add_argument("--per-group", type=int, default=0,
                    help="problems per op and chip (default 12 for tokamax spaces, else 1)")
    ap.add_argument("--cap", type=int, default=40, help="tokamax spaces: candidates tuned per "
                    "row at most (the winner and a seeded sample of the rest; 0: all). With 40, "
                    "the best 10%% is 4 candidates: 8 made it the first alone, which put a "
                    "winner predicted at the 15th percentile in or out by chance")
    ap.add_argument("--jobs", type=int, default=1, help="tokamax spaces: rows tuned at once "
                    "(worker processes)")
    args = ap.parse_args()
    table = args.csv or os.environ.get("PALLASLAB_PUBLISHED_TIMINGS") or str(DEFAULT_CSV)
    rows = [r for r in pub.tpu_rows(pub.read_rows(table)) if r.op
            and args.op in ("", r.op) and args.chip in ("", r.chip)]
    per_group = args.per_group or (12 if args.spaces == "tokamax" else 1)
    if args.spaces == "tokamax":
        return tokamax_main(sample(rows, per_group), len(rows), args.cap, args.jobs)
    space_of = spaces(rows)
    picked = sample(rows, per_group)
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
    return report(groups, failed, start, summary, final_line)


def report(groups: dict[tuple[str, str], list[Outcome]], failed: collections.Counter[str],
           start: float, summarize: Callable[[Sequence[Outcome]], str],
           last: Callable[[Sequence[Outcome]], str]) -> int:
    """The figures per op and chip, over all, the rows not tuned, and the final line."""
    print(f"\n{time.perf_counter() - start:.0f} s")
    for (op, chip), outs in sorted(groups.items()):
        print(f"{op:<20} {chip:<4} {summarize(outs)}")
    every = [o for outs in groups.values() for o in outs]
    print(f"{'all':<25} {summarize(every)}")
    for reason, count in failed.most_common():
        print(f"not tuned: {count} x {reason}")
    if last is tune_line:
        print(blocks_line(every))
    print(last(every))
    return 0


def tokamax_main(picked: Sequence[pub.Row], total: int, cap: int, jobs: int = 1) -> int:
    print(f"{len(picked)} rows from {total} TPU rows; space: tokamax's autotuning configs of "
          f"each row's problem and chip (at most {cap or 'all'} tuned: the winner and a seeded "
          f"sample); model only (no libtpu: its refusals estimated by the VMEM fit), ties "
          f"within {TIE:.0%} against the model", flush=True)
    start = time.perf_counter()
    groups: dict[tuple[str, str], list[Outcome]] = collections.defaultdict(list)
    failed: collections.Counter[str] = collections.Counter()
    for row, o in zip(picked, placed(picked, cap, jobs), strict=True):
        if isinstance(o, str):
            failed[o] += 1
            continue
        show(row, o, groups)
    return report(groups, failed, start, space_summary, tune_line)


def placed(picked: Sequence[pub.Row], cap: int, jobs: int) -> Iterator[Outcome | str]:
    """`place` of each row in order, in `jobs` spawned processes (no fork of a process with
    JAX's threads); a worker that dies (the OOM killer) costs its row, and a new pool goes on
    with the rest."""
    if jobs <= 1:
        yield from (place(row, cap) for row in picked)
        return
    spawn = multiprocessing.get_context("spawn")
    left = list(picked)
    while left:
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=spawn,
                                                    initializer=_limit) as pool:
            futures = [pool.submit(place, row, cap) for row in left]
            for n, future in enumerate(futures):
                try:
                    yield future.result()
                except concurrent.futures.process.BrokenProcessPool:
                    yield "a worker died (out of memory?)"
                    left = left[n + 1:]
                    break
            else:
                left = []


def place(row: pub.Row, cap: int) -> Outcome | str:
    """Where the model puts the row's winner in tokamax's space (at most `cap` candidates),
    or why the row is not tuned."""
    try:
        space, winner = tokamax_space(row)
        in_space = any(config_key(c) == config_key(winner) for c in space)
        result, batch = tune_row(row, capped(space, winner, cap, row.line))
    except pub.BuildError as err:
        return err.reason
    except MemoryError:  # a worker's own limit (`_limit`), not the machine's OOM killer
        return f"out of memory (over {WORKER_MEMORY >> 30} GiB)"
    return outcome(row, result, batch, winner, len(space) + (not in_space), in_space)


WORKER_MEMORY = 12 << 30  # address space of a `--jobs` worker: a row past it is not tuned


def _limit() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))


def show(row: pub.Row, o: Outcome, groups: dict[tuple[str, str], list[Outcome]]) -> None:
    groups[(row.op or "", row.chip or "")].append(o)
    where = f"rank {o.rank}/{o.kept}" if o.rank is not None else f"OUT ({(o.reason or '')[:80]})"
    where += f", {o.twins} twin(s)" if o.twins else ""
    if o.block_rank is not None:
        where += f"; its block sizes {o.block_rank}/{o.block_sizes}"
    print(f"  line {row.line:4d} {row.op:<20} {row.chip:<4} space {o.space:4d}, "
          f"{o.candidates:3d} tuned, {o.outs:3d} out, winner {where}"
          f"{'' if o.in_space else ' (not in the space: added)'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

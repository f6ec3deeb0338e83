"""A campaign: kernels (seed, 0), (seed, 1), ... judged until a time budget or a count is
spent, tallied per grammar feature and per outcome."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import itertools
import math
import multiprocessing
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fuzz.grammar import FAMILIES, generate
from fuzz.runner import (
    DISAGREEMENT,
    FAILURES,
    FALSE_ERROR,
    INTERNAL_ERROR,
    MUTANT_CAUGHT,
    MUTANT_MISSED,
    Verdict,
    judge_many,
)

WINDOW = 24  # kernels drawn, then judged (`judge_many`), between looks at the clock


@dataclasses.dataclass(frozen=True)
class Tally:
    verdicts: tuple[Verdict, ...]
    seconds: float

    def count(self, outcome: str) -> int:
        return sum(v.outcome == outcome for v in self.verdicts)

    @property
    def failures(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if v.outcome in FAILURES)

    def summary_line(self) -> str:
        caught, missed = self.count(MUTANT_CAUGHT), self.count(MUTANT_MISSED)
        return (f"fuzz: {len(self.verdicts)} kernels, internal errors {self.count(INTERNAL_ERROR)}"
                f", false errors {self.count(FALSE_ERROR)}, disagreements "
                f"{self.count(DISAGREEMENT)}, mutants caught {caught}/{caught + missed}")

    def report(self) -> list[str]:
        lines = ["per outcome:"]
        outcomes = collections.Counter(v.outcome for v in self.verdicts)
        lines += [f"  {name:22} {n}" for name, n in sorted(outcomes.items())]
        lines.append("per feature (kernels, failures):")
        seen: collections.Counter[str] = collections.Counter()
        bad: collections.Counter[str] = collections.Counter()
        for v in self.verdicts:
            for f in (*v.generated.kernel.features, f"mutation:{v.generated.mutation}"):
                seen[f] += 1
                bad[f] += v.outcome in FAILURES
        lines += [f"  {f:40} {n:5} {bad[f]:5}" for f, n in sorted(seen.items())]
        checked = [v for v in self.verdicts if v.outcome in (MUTANT_CAUGHT, MUTANT_MISSED)]
        lines.append(f"mutants with check error findings: "
                     f"{sum(bool(v.check_errors) for v in checked)}/{len(checked)}")
        lines += [f"FAIL {v.outcome} {v.generated.name}: {v.detail[:300]} -> {v.case_file}"
                  for v in self.failures]
        kps = len(self.verdicts) / self.seconds if self.seconds else 0.0
        lines.append(f"{self.seconds:.1f} s, {kps:.2f} kernels/s")
        return lines


def run_campaign(seed: int, *, seconds: float = 60.0, max_kernels: int | None = None,
                 start: int = 0, timeout: float = 60.0, out_dir: Path | None = None,
                 families: tuple[str, ...] = FAMILIES, avoid: frozenset[str] = frozenset(),
                 on_verdict: Callable[[Verdict], None] | None = None,
                 batch: int = 1, jobs: int = 1) -> Tally:
    """Kernels judged WINDOW at a time (`judge_many`, `batch` per compare), the time budget
    checked between; with `jobs` > 1, windows judged by that many processes at once (each
    kernel is drawn from (seed, index) alone, so the tallies are those of one process)."""
    t0 = time.perf_counter()
    window = functools.partial(_judge_window, seed, timeout=timeout, out_dir=out_dir,
                               families=families, avoid=avoid, batch=batch)
    verdicts: list[Verdict] = []
    for judged in _windows(window, start, max_kernels, jobs,
                           lambda: time.perf_counter() - t0 < seconds):
        for verdict in judged:
            verdicts.append(verdict)
            if on_verdict is not None:
                on_verdict(verdict)
    return Tally(tuple(verdicts), time.perf_counter() - t0)


def _judge_window(seed: int, start: int, count: int, **options: Any) -> list[Verdict]:
    families, avoid = options.pop("families"), options.pop("avoid")
    drawn = [generate(seed, i, families=families, avoid=avoid)
             for i in range(start, start + count)]
    return judge_many(drawn, **options)


def _windows(window: Callable[[int, int], list[Verdict]], start: int, max_kernels: int | None,
             jobs: int, time_left: Callable[[], bool]) -> Iterator[list[Verdict]]:
    """The judged windows in index order: `jobs` in flight at once (jobs > 1: in processes),
    a new one started while time is left and kernels remain."""
    end = math.inf if max_kernels is None else start + max_kernels
    starts = itertools.takewhile(lambda i: i < end, itertools.count(start, WINDOW))

    def sized(i: int) -> tuple[int, int]:
        return i, int(min(WINDOW, end - i))

    if jobs <= 1:
        for i in starts:
            if not time_left():
                return
            yield window(*sized(i))
        return
    # spawn: each job imports JAX afresh (a forked JAX is not safe)
    with concurrent.futures.ProcessPoolExecutor(
            jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        flight: collections.deque[concurrent.futures.Future[list[Verdict]]] = collections.deque()
        for i in starts:
            if not time_left():
                break
            flight.append(pool.submit(window, *sized(i)))
            if len(flight) >= jobs:
                yield flight.popleft().result()
        while flight:
            yield flight.popleft().result()

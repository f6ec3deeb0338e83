"""A campaign: kernels (seed, 0), (seed, 1), ... judged until a time budget or a count is
spent, tallied per grammar feature and per outcome."""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

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
                 batch: int = 1) -> Tally:
    """Kernels judged WINDOW at a time (`judge_many`, `batch` per compare), the time budget
    checked between."""
    t0 = time.perf_counter()
    verdicts: list[Verdict] = []
    index = start
    while time.perf_counter() - t0 < seconds and (max_kernels is None
                                                   or len(verdicts) < max_kernels):
        count = WINDOW if max_kernels is None else min(WINDOW, max_kernels - len(verdicts))
        drawn = [generate(seed, i, families=families, avoid=avoid)
                 for i in range(index, index + count)]
        for verdict in judge_many(drawn, timeout=timeout, out_dir=out_dir, batch=batch):
            verdicts.append(verdict)
            if on_verdict is not None:
                on_verdict(verdict)
        index += count
    return Tally(tuple(verdicts), time.perf_counter() - t0)

"""The tail both published-timings benchmarks print (bench_published.py for TPU rows,
bench_published_gpu.py for GPU rows): the rows not built by reason, the worst rows, and the
final `LABEL: N rows, built B, median ratio R, within 2x P%` line."""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def print_tail(label: str, rows: Sequence[Any], results: Mapping[int, Any],
               failures: Mapping[int, str], describe: Callable[[Any], str]) -> None:
    """`results`: row index -> a prediction with `.ratio` (predicted/measured) and `.row`;
    `describe(p)` words a worst row after its ratio."""
    if failures:
        print("not built:")
        for reason, n in collections.Counter(failures.values()).most_common():
            print(f"  {n:4d}  {reason}")
    worst = sorted(results.values(), key=lambda p: -abs(np.log(p.ratio)))[:8]
    print("worst rows (predicted/measured):")
    for p in worst:
        print(f"  {p.ratio:5.2f}  {describe(p)}")
    ratios = [p.ratio for p in results.values()]
    r = np.asarray(ratios) if ratios else np.asarray([np.nan])
    within = np.mean(np.maximum(r, 1 / r) <= 2) if ratios else 0.0
    print(f"{label}: {len(rows)} rows, built {len(results)}, median ratio "
          f"{np.median(r):.2f}, within 2x {within:.0%}")

"""The mutant catalog's caught-and-explained rate (tests/mutants): each single-bug kernel is
compared with its reference; caught when compare does not pass, explained when the cause it
names (or the finding) is the expected one.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_mutants.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "mutants"))

import dma_mutants  # noqa: F401  (each registers its mutants)
import gpu_mutants  # noqa: F401
import tpu_mutants  # noqa: F401
from mutant_registry import MUTANTS, caught_and_explained

import pallaslab


def main() -> None:
    caught = explained = 0
    for name, m in MUTANTS.items():
        fn, args = m.case()
        start = time.perf_counter()
        result = pallaslab.compare(fn, *args, executors=",".join(m.executors),
                                   reference=m.reference)
        seconds = time.perf_counter() - start
        got, why, said = caught_and_explained(m, result)
        caught += got
        explained += got and why
        print(f"{name}: {'caught' if got else 'MISSED'}, "
              f"{'explained' if why else 'NOT explained'} ({seconds:.1f} s; {m.bug})\n"
              f"    {said}")
    n = len(MUTANTS)
    print(f"mutants: {n}, caught {caught}, explained {explained} "
          f"(rate {100 * explained / max(n, 1):.0f}%)")


if __name__ == "__main__":
    main()

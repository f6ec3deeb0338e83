"""The mutant catalog's caught-and-explained rate (tests/mutants): each single-bug kernel is
compared with its reference; caught when compare does not pass, explained when the cause it
names (or the finding) is the expected one.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_mutants.py [--library]

`--library` runs only the mutants of a library no one here wrote (tokamax), with its own
caught / located / cause-right line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "mutants"))

import body_mutants  # noqa: F401  (each registers its mutants)
import dma_mutants  # noqa: F401
import gpu_mutants  # noqa: F401
import tpu_mutants  # noqa: F401
from mutant_registry import MUTANTS, caught_and_explained

import pallaslab


def compared(m):
    """The mutant's comparison and its seconds."""
    fn, args = m.case()
    start = time.perf_counter()
    result = pallaslab.compare(fn, *args, executors=",".join(m.executors),
                               reference=m.reference)
    return result, time.perf_counter() - start


def library() -> None:
    """tokamax's splash attention with one bug each, through tokamax's op
    (tests/mutants/library_mutants.py): caught, located (the programs that wrote a wrong
    element named) and cause right."""
    try:
        from library_mutants import LIBRARY_MUTANTS
    except ImportError as e:  # tokamax is in the test extra
        print(f"library mutants: skipped ({e})")
        return
    caught = located = right = 0
    for name, m in LIBRARY_MUTANTS.items():
        result, seconds = compared(m)
        got, why, said = caught_and_explained(m, result)
        where = bool(result.mismatched_programs())
        caught += got
        located += got and where
        right += got and why
        print(f"{name}: {'caught' if got else 'MISSED'}, "
              f"{'located' if where else 'NOT located'}, "
              f"cause {'right' if why else 'NOT right'} ({seconds:.1f} s; {m.bug})\n"
              f"    {said}")
    print(f"library mutants (tokamax): {len(LIBRARY_MUTANTS)}, caught {caught}, "
          f"located {located}, cause right {right}")


def main() -> None:
    if "--library" in sys.argv[1:]:
        library()
        return
    caught = explained = 0
    for name, m in MUTANTS.items():
        result, seconds = compared(m)
        got, why, said = caught_and_explained(m, result)
        caught += got
        explained += got and why
        print(f"{name}: {'caught' if got else 'MISSED'}, "
              f"{'explained' if why else 'NOT explained'} ({seconds:.1f} s; {m.bug})\n"
              f"    {said}")
    n = len(MUTANTS)
    print(f"mutants: {n}, caught {caught}, explained {explained} "
          f"(rate {100 * explained / max(n, 1):.0f}%)")
    library()


if __name__ == "__main__":
    main()

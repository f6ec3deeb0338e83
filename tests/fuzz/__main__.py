"""`python -m fuzz --seconds S --seed N [--out DIR]` (tests/ on PYTHONPATH): a campaign,
its tallies, and the line `fuzz: N kernels, internal errors I, false errors F, disagreements
D, mutants caught C/M`. Exit 1 when anything failed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuzz.campaign import run_campaign
from fuzz.grammar import FAMILIES, PARALLEL_AFTER_ARBITRARY, ROUND_TRIP
from fuzz.runner import FAILURES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    p.add_argument("--seconds", type=float, default=120.0, help="time budget of the campaign")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="the first kernel index")
    p.add_argument("--max-kernels", type=int, default=None)
    p.add_argument("--timeout", type=float, default=60.0, help="each executor run's limit (s)")
    p.add_argument("--out", type=Path, default=Path("test-results/fuzz"),
                   help="where failing kernels are written as case files")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes judging kernels at once (each runs its executors' workers)")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--avoid-known", action="store_true",
                   help=f"leave out the known open issues' features ({PARALLEL_AFTER_ARBITRARY}"
                        f", {ROUND_TRIP})")
    args = p.parse_args(argv)
    avoid = frozenset({PARALLEL_AFTER_ARBITRARY, ROUND_TRIP}) if args.avoid_known else frozenset()

    def progress(v: object) -> None:
        if getattr(v, "outcome", "") in FAILURES:
            print(f"  {v.outcome}: {v.generated.name} {v.detail[:200]}",  # type: ignore[attr-defined]
                  file=sys.stderr, flush=True)

    tally = run_campaign(args.seed, seconds=args.seconds, max_kernels=args.max_kernels,
                         start=args.start, timeout=args.timeout, out_dir=args.out,
                         families=tuple(args.families.split(",")), avoid=avoid,
                         on_verdict=progress, jobs=args.jobs)
    print("\n".join(tally.report()))
    print(tally.summary_line())
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())

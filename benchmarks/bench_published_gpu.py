"""The GPU model against tokamax's published H100 and B200 timings (issue 42).

For every GPU row of the published autotuning table: build tokamax's kernel with the row's
problem and config, capture it on this CPU for the row's GPU, predict its time with
`pallaslab.analysis.gpu_model` and compare with the published median. A row's prediction is
the whole op as tokamax runs it: every kernel the capture finds (a VJP's dK/dV and dQ
kernels) plus the XLA ops between them (their HBM traffic and launches). tokamax's Triton
GLU, ragged dot and normalization are `jax_triton` kernels, not Pallas: their launches are
traced instead (grid, warps, stages, arrays) and predicted with the problem's work. Rows that
cannot be built are counted with their reason. Prints, per op, backend
and GPU: rows, built, median predicted/measured, the shares within 1.25x and 2x; then the
worst rows, the bounds, and a final `published-gpu:` line.

Run: JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_published_gpu.py [CSV] [--limit N]
(CSV defaults to $PALLASLAB_PUBLISHED_TIMINGS, else ../shared/published/...). Not part of
`make test`.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from _published_report import print_tail

from pallaslab.analysis import gpu_model_published as gp
from pallaslab.analysis import published as pub

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared/published/tokamax_autotune_pallas.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", default=os.environ.get("PALLASLAB_PUBLISHED_TIMINGS")
                    or str(DEFAULT_CSV))
    ap.add_argument("--limit", type=int, default=0, help="only the first N GPU rows "
                    "(taken one per op, backend and GPU in turn)")
    ap.add_argument("--op", default="", help="only rows whose op file contains this")
    opts = ap.parse_args()
    if not Path(opts.csv).is_file():
        print(f"published-gpu: no table at {opts.csv}: nothing measured")
        return 1
    rows = [r for r in gp.gpu_rows(pub.read_rows(opts.csv)) if opts.op in r.op_file]
    rows = pub.round_robin(rows)
    rows = rows[: opts.limit] if opts.limit else rows
    results, failures = run(rows)
    report(rows, results, failures)
    return 0


def run(rows: list[pub.Row]) -> tuple[dict[int, gp.GpuRowPrediction], dict[int, str]]:
    cache: dict[tuple[str, str, str, str], gp.GpuRowPrediction | str] = {}
    results: dict[int, gp.GpuRowPrediction] = {}
    failures: dict[int, str] = {}
    start = time.perf_counter()
    for i, row in enumerate(rows):
        hit = cache.get(row.key)
        if hit is None:
            try:
                hit = gp.predict(row)
            except pub.BuildError as err:
                hit = err.reason
            except Exception as err:  # a tokamax or model failure: tallied, never dropped
                text = str(err).splitlines()[0][:80] if str(err) else ""
                hit = f"{type(err).__name__}: {text}"
            cache[row.key] = hit
        if isinstance(hit, str):
            failures[i] = hit
        else:
            results[i] = hit
        if (i + 1) % 25 == 0 or i + 1 == len(rows):
            print(f"  [{i + 1}/{len(rows)}] {time.perf_counter() - start:.0f} s, "
                  f"{len(failures)} not built", file=sys.stderr, flush=True)
    return results, failures


def report(rows: list[pub.Row], results: dict[int, gp.GpuRowPrediction],
           failures: dict[int, str]) -> None:
    groups: dict[tuple[str, str, str], list[int]] = collections.defaultdict(list)
    for i, row in enumerate(rows):
        backend, op = gp.backend_op(row)
        groups[(op, backend, gp.gpu_of(row) or row.hardware)].append(i)
    print(f"{'op':<26}{'backend':<11}{'gpu':<5}{'rows':>5}{'built':>6}  predicted/measured")
    for (op, backend, gpu), idx in sorted(groups.items()):
        ratios = [results[i].ratio for i in idx if i in results]
        print(f"{op:<26}{backend:<11}{gpu:<5}{len(idx):>5}{len(ratios):>6}  "
              f"{pub.ratio_stats(ratios)}")
    bounds = collections.Counter(b for p in results.values() for b in p.bounds)
    print("bounds: " + ", ".join(f"{b} {n}" for b, n in bounds.most_common()))
    print_tail("published-gpu", rows, results, failures,
               lambda p: f"{p.row.op_file} {p.row.hardware} line {p.row.line}: "
                      f"{p.row.problem[:60]} {p.row.config[:60]}")

if __name__ == "__main__":
    sys.exit(main())

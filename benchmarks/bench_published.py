"""The pipeline model against tokamax's published TPU timings (issue 31).

For every TPU row of the published autotuning table: build tokamax's kernel with the row's
problem and config, capture it on this CPU for the row's chip, run the model and compare the
predicted time with the published median. Rows that cannot be built are counted with their
reason. Prints, per op and chip: rows, built, median predicted/measured, the share within
1.25x and within 2x; then the worst rows and a final `published:` line.

Run: JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_published.py [CSV] [--limit N]
(CSV defaults to $PALLASLAB_PUBLISHED_TIMINGS, else ../shared/published/...). Not part of
`make test`: ~600 captures, about 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")


from _published_report import print_tail

from pallaslab.analysis import published as pub

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared/published/tokamax_autotune_pallas.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", default=os.environ.get("PALLASLAB_PUBLISHED_TIMINGS")
                    or str(DEFAULT_CSV))
    ap.add_argument("--limit", type=int, default=0, help="only the first N TPU rows")
    ap.add_argument("--op", default="", help="only rows of this op (e.g. ragged_dot)")
    ap.add_argument("--chip", default="", help="only rows of this chip (e.g. 7x)")
    ap.add_argument("--resume", default="", help="a JSON-lines file of results: rows already "
                    "in it are not captured again, new ones are appended as they finish")
    ap.add_argument("--report-only", action="store_true",
                    help="with --resume: report the rows already there, capture nothing")
    opts = ap.parse_args()
    if not Path(opts.csv).is_file():
        print(f"published: no table at {opts.csv}: nothing measured")
        return 1
    rows = [r for r in pub.tpu_rows(pub.read_rows(opts.csv)) if opts.op in (r.op or "")
            and opts.chip in ("", r.chip)]
    rows = pub.round_robin(rows)  # every op and chip early, so a partial run covers them all
    rows = rows[: opts.limit] if opts.limit else rows
    done = _load(opts.resume) if opts.resume else {}
    if opts.report_only:
        rows = [r for r in rows if _key_text(r) in done]
    results, failures = run(rows, done, opts.resume or None)
    report(rows, results, failures)
    return 0


def _key_text(row: pub.Row) -> str:
    return json.dumps(row.key)


def _load(path: str) -> dict[str, dict[str, Any]]:
    if not Path(path).is_file():
        return {}
    with open(path) as f:
        return {rec["key"]: rec for rec in map(json.loads, f) if rec.get("key")}


def _from_record(row: pub.Row, rec: dict[str, Any]) -> pub.Prediction | str:
    if "reason" in rec:
        return str(rec["reason"])
    return pub.Prediction(row=row, predicted_s=float(rec["predicted_s"]),
                          kernels=tuple(rec["kernels"]), methods=tuple(rec["methods"]))


def _save(path: str | None, row: pub.Row, hit: pub.Prediction | str) -> None:
    if path is None:
        return
    rec: dict[str, Any] = {"key": _key_text(row)}
    if isinstance(hit, str):
        rec["reason"] = hit
    else:
        rec.update(predicted_s=hit.predicted_s, kernels=hit.kernels, methods=hit.methods)
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def run(rows: list[pub.Row], done: dict[str, dict[str, Any]] | None = None,
        resume: str | None = None) -> tuple[dict[int, pub.Prediction], dict[int, str]]:
    done = done or {}
    cache: dict[tuple[str, str, str, str], pub.Prediction | str] = {}
    results: dict[int, pub.Prediction] = {}
    failures: dict[int, str] = {}
    start = time.perf_counter()
    for i, row in enumerate(rows):
        hit = cache.get(row.key)
        if hit is None and _key_text(row) in done:
            hit = cache[row.key] = _from_record(row, done[_key_text(row)])
        if hit is None:
            try:
                hit = pub.predict(row)
            except pub.BuildError as err:
                hit = err.reason
            except Exception as err:  # a tokamax or model failure: tallied, never dropped
                hit = f"{type(err).__name__}: {str(err).splitlines()[0][:80] if str(err) else ''}"
            cache[row.key] = hit
            _save(resume, row, hit)
        if isinstance(hit, str):
            failures[i] = hit
        else:
            results[i] = pub.Prediction(row=row, predicted_s=hit.predicted_s,
                                        kernels=hit.kernels, methods=hit.methods)
        if (i + 1) % 25 == 0 or i + 1 == len(rows):
            print(f"  [{i + 1}/{len(rows)}] {time.perf_counter() - start:.0f} s, "
                  f"{len(failures)} not built", file=sys.stderr, flush=True)
    return results, failures


def report(rows: list[pub.Row], results: dict[int, pub.Prediction],
           failures: dict[int, str]) -> None:
    groups: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for i, row in enumerate(rows):
        groups[(row.op or row.op_file, row.chip or row.hardware)].append(i)
    print(f"{'op':<22}{'chip':<5}{'rows':>5}{'built':>6}  predicted/measured")
    for (op, chip), idx in sorted(groups.items()):
        ratios = [results[i].ratio for i in idx if i in results]
        print(f"{op:<22}{chip:<5}{len(idx):>5}{len(ratios):>6}  {pub.ratio_stats(ratios)}")
    methods = collections.Counter(m for p in results.values() for m in p.methods)
    print("kernel models used: " + ", ".join(f"{m} {n}" for m, n in methods.most_common()))
    print_tail("published", rows, results, failures,
               lambda p: f"{p.row.op} {p.row.chip} line {p.row.line}: "
                      f"{p.row.problem[:70]} {p.row.config[:60]}")

if __name__ == "__main__":
    sys.exit(main())

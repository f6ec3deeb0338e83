"""The peer corpus (tests/peer/): every kernel of JAX's own Pallas tests through inspect,
check, compare and lower --compile, tallied per capability, with every failure's cause, the
time each stage took in all, and gpu_wrong.py's deliberately wrong kernels (they must fail).

    .venv/bin/python benchmarks/bench_peer.py [NAME_OR_KIND ...]

Peers on several simulated devices run in one process of that many devices (as the test does).
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "peer"))

from run import (
    STAGES,
    PeerReport,
    StageResult,
    judge_wrong,
    load_peers,
    run_peer,
    run_peers_on_devices,
    wrong_kernels,
)

COLUMNS = {"inspect": "inspect ok", "check": "check ok",
           "compare": "compare close (JAX can't)", "lower": "lower ok"}


def main(selected: list[str]) -> int:
    peers = [p for p in load_peers().values()
             if not selected or p.name in selected or p.kind in selected]
    start = time.perf_counter()
    reports = [_reported(run_peer(p)) for p in peers if p.devices == 1]
    batch_start = time.perf_counter()
    batch = run_peers_on_devices([p for p in peers if p.devices > 1])
    reports += [_reported(r) for r in batch.values()]
    batch_s = time.perf_counter() - batch_start
    wrong = [] if selected else [_reported_wrong(judge_wrong(n)) for n in sorted(wrong_kernels())]
    _print_tallies(reports)
    _print_times(reports, wrong, batch_s, len(batch))
    _print_failures(reports, wrong)
    print(_summary(reports, wrong))
    print(f"{time.perf_counter() - start:.0f} s for {len(reports)} peers")
    return 0 if all(s.ok for r in reports for s in r.stages) and all(w.ok for w in wrong) else 1


def _reported(report: PeerReport) -> PeerReport:
    print(f"  {report.peer.name}: " + " ".join(
        f"{s.stage}={'ok' if s.ok else 'FAIL'}" for s in report.stages), flush=True)
    return report


def _reported_wrong(result: StageResult) -> StageResult:
    print(f"  wrong kernel: {'fails as it must' if result.ok else result.cause}", flush=True)
    return result


def _print_tallies(reports: list[PeerReport]) -> None:
    by_kind: dict[str, list[PeerReport]] = collections.defaultdict(list)
    for r in reports:
        by_kind[r.peer.kind].append(r)
    header = f"{'kind':18s} {'peers':>5s} " + " ".join(f"{c:>26s}" for c in COLUMNS.values())
    print("\n" + header + "\n" + "-" * len(header))
    for kind, group in sorted(by_kind.items()):
        print(_row(kind, group))
    print("-" * len(header) + "\n" + _row("total", reports))


def _row(label: str, group: list[PeerReport]) -> str:
    cells = []
    for stage in STAGES:
        results = [r.stage(stage) for r in group]
        ok = sum(s.ok and s.jax_limit is None and s.skipped is None for s in results)
        cell = f"{ok}/{len(group)}"
        if jax_cannot := sum(s.ok and s.jax_limit is not None for s in results):
            cell += f" ({jax_cannot})"
        if skipped := sum(s.skipped is not None for s in results):
            cell += f" {skipped} n/a"
        cells.append(cell)
    return f"{label:18s} {len(group):5d} " + " ".join(f"{c:>26s}" for c in cells)


def _print_times(reports: list[PeerReport], wrong: list[StageResult], batch_s: float,
                 batch_peers: int) -> None:
    totals = {stage: sum(r.stage(stage).seconds for r in reports) for stage in STAGES}
    print("\nseconds per stage, all peers: " + ", ".join(
        f"{stage} {s:.0f}" for stage, s in totals.items())
        + f"; wrong kernels {sum(w.seconds for w in wrong):.0f}"
        + f"; the {batch_peers} multi-device peers' one process {batch_s:.0f} (start-up included)")


def _print_failures(reports: list[PeerReport], wrong: list[StageResult]) -> None:
    failures = [(f"{r.peer.module}:{r.peer.name} [{r.peer.kind}] {s.stage}", s)
                for r in reports for s in r.stages if not s.ok]
    failures += [("gpu_wrong.py", w) for w in wrong if not w.ok]
    print(f"\n{len(failures)} failure(s)")
    for where, s in failures:
        print(f"  {where} ({s.failure}): {s.cause}")


def _summary(reports: list[PeerReport], wrong: list[StageResult]) -> str:
    results = [s for r in reports for s in r.stages] + wrong
    count = collections.Counter(s.failure for s in results if not s.ok)
    jax_limits = sum(s.jax_limit is not None for s in results)
    incomplete = count["incomplete"] + jax_limits
    return (f"\npeer corpus: {len(reports)} kernels, internal errors {count['internal']}, "
            f"false errors {count['false-error']}, false passes {count['false-pass']}, "
            f"incomplete comparisons {incomplete} (JAX's own limits {jax_limits})")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

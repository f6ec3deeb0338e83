"""The peer corpus (tests/peer/): every kernel of JAX's own Pallas tests through inspect,
check, compare and lower --compile, tallied per capability, with every failure's cause.

    .venv/bin/python benchmarks/bench_peer.py [NAME_OR_KIND ...]
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "peer"))

from run import STAGES, PeerReport, load_peers, run_peer

COLUMNS = {"inspect": "inspect ok", "check": "check ok", "compare": "compare complete & close",
           "lower": "lower ok"}


def main(selected: list[str]) -> int:
    peers = [p for p in load_peers().values()
             if not selected or p.name in selected or p.kind in selected]
    reports: list[PeerReport] = []
    start = time.perf_counter()
    for p in peers:
        reports.append(run_peer(p))
        print(f"  {p.name}: " + " ".join(
            f"{s.stage}={'ok' if s.ok else 'FAIL'}" for s in reports[-1].stages), flush=True)
    _print_tallies(reports)
    print(f"\n{time.perf_counter() - start:.0f} s for {len(reports)} peers")
    return 0 if all(s.ok for r in reports for s in r.stages) else 1


def _print_tallies(reports: list[PeerReport]) -> None:
    by_kind: dict[str, list[PeerReport]] = collections.defaultdict(list)
    for r in reports:
        by_kind[r.peer.kind].append(r)
    header = f"{'kind':18s} {'peers':>5s} " + " ".join(f"{c:>24s}" for c in COLUMNS.values())
    print("\n" + header + "\n" + "-" * len(header))
    for kind, group in sorted(by_kind.items()):
        print(_row(kind, group))
    print("-" * len(header) + "\n" + _row("total", reports))
    failures = [(r.peer, s) for r in reports for s in r.stages if not s.ok]
    print(f"\n{len(failures)} failure(s)")
    for p, s in failures:
        print(f"  {p.module}:{p.name} [{p.kind}] {s.stage}: {s.cause}")


def _row(label: str, group: list[PeerReport]) -> str:
    cells = []
    for stage in STAGES:
        ok = sum(r.stage(stage).ok for r in group)
        skipped = sum(r.stage(stage).skipped is not None for r in group)
        cells.append(f"{ok}/{len(group)}" + (f" ({skipped} n/a)" if skipped else ""))
    return f"{label:18s} {len(group):5d} " + " ".join(f"{c:>24s}" for c in cells)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

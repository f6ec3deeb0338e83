"""What the killable worker process costs: one executor run in this process against the same
run in the worker (cold: the worker starts; warm: it is reused), side by side, on a small
kernel (where the overhead shows most) and on an f32 matmul 512^3 with 128-blocks.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_isolation.py
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kernels import elementwise_2d, matmul, rand

from pallaslab.execute.prepared import prepare
from pallaslab.execute.registry import get_executor
from pallaslab.execute.worker import isolation
from pallaslab.execute.worker.running import execute_here


def timed(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
        assert result.status == "ran", result.reason
    return statistics.median(times)


def main() -> None:
    x, y = rand((512, 512)), rand((512, 512), seed=1)
    cases = {
        "elementwise 256x256": (lambda a, b: elementwise_2d(a, b, interpret=True),
                                (x[:256, :256], y[:256, :256])),
        "matmul 512^3, 128-blocks": (lambda a, b: matmul(a, b, interpret=True), (x, y)),
    }
    interpret = get_executor("interpret")
    print(f"{'kernel':28} {'in-process':>11} {'worker cold':>12} {'worker warm':>12} "
          f"{'warm/in-process':>16}")
    for name, (fn, args) in cases.items():
        prepared = prepare(fn, args)
        here = timed(lambda p=prepared: execute_here(interpret, p, math.inf))
        isolation.shutdown_worker()
        t = time.perf_counter()
        isolation.run_isolated(interpret, prepared, math.inf)
        cold = time.perf_counter() - t
        warm = timed(lambda p=prepared: isolation.run_isolated(interpret, p, math.inf))
        print(f"{name:28} {here * 1e3:9.0f}ms {cold * 1e3:10.0f}ms {warm * 1e3:10.0f}ms "
              f"{warm / here:15.2f}x")


if __name__ == "__main__":
    main()

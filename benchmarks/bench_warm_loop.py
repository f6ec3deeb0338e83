"""The warm loop: `pallaslab.run` called again with the same arguments, against jitted `jnp.dot`.

Kernel: JAX's matmul guide kernel (f32 1024^3, 128-blocks, `tests/kernels.py`), run by the
`vectorized` executor in the worker process, end to end (tracing, the trip to the worker, the
run and the outputs' return). The first call compiles (cold: the in-process cache is empty;
JAX's persistent cache may still hold it from an earlier process); later calls find the
compiled computation in the worker's cache (warm). Goal: warm within 3x of `jnp.dot`.
Figures are medians; the cache statistics come from the worker.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_warm_loop.py
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kernels import matmul, rand

import pallaslab
from pallaslab.execute import compile_cache_stats

RUNS = 7


def timed(f: Callable[[], Any]) -> float:
    t = time.perf_counter()
    jax.block_until_ready(f())
    return time.perf_counter() - t


def median_time(f: Callable[[], Any]) -> float:
    return statistics.median(timed(f) for _ in range(RUNS))


def measure() -> dict[str, Any]:
    """The figures `main` prints: seconds of jnp.dot, of the cold and the warm run, the warm
    run's compiled part, and the worker's cache statistics before and after."""
    n = 1024
    x, y = rand((n, n)), rand((n, n), seed=1)
    dot = jax.jit(jnp.dot)
    jax.block_until_ready(dot(x, y))
    base = median_time(lambda: dot(x, y))

    def run() -> Any:
        result = pallaslab.run(matmul, x, y, executor="vectorized")
        assert result.outputs is not None, result.error
        return result.outputs

    pallaslab.execute.worker.isolation.prewarm_worker()
    compile_cache_stats("worker")  # waits for the worker to start: not part of a run
    before = compile_cache_stats("worker")
    cold = timed(run)
    warm = median_time(run)
    after = compile_cache_stats("worker")
    inside = pallaslab.run(matmul, x, y, executor="vectorized")
    return {"base": base, "cold": cold, "warm": warm, "inside": inside, "before": before,
            "after": after}


def main() -> None:
    m = measure()
    base, cold, warm, inside = m["base"], m["cold"], m["warm"], m["inside"]
    before, after = m["before"], m["after"]
    print(f"matmul 1024^3 f32, 128-blocks, vectorized executor, through the worker "
          f"(medians of {RUNS})")
    print(f"{'jnp.dot (jit)':34s} {base * 1e3:8.1f} ms")
    print(f"{'pallaslab.run cold (1st call)':34s} {cold * 1e3:8.1f} ms  {cold / base:6.1f}x jnp")
    print(f"{'pallaslab.run warm (2nd+ calls)':34s} {warm * 1e3:8.1f} ms  {warm / base:6.1f}x jnp"
          f"  (goal <= 3x)")
    print(f"{'  of which the compiled run':34s} {inside.wall_time * 1e3:8.1f} ms"
          f"  (compile {inside.compile_time * 1e3:.1f} ms)")
    print(f"cold / warm: {cold / warm:.1f}x; worker cache: "
          f"+{after.hits - before.hits} hits, +{after.misses - before.misses} misses "
          f"({after.size}/{after.maxsize} entries)")


if __name__ == "__main__":
    main()

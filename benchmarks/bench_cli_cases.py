"""Several cases in one CLI call (issue 28): `pallaslab compare` of 8 small catalog cases in
ONE call against 8 separate calls, and `pallaslab --help`, side by side in one run.

Goals: the one call takes at most 40% of the eight; `--help` at most 0.5 s (it imports no
JAX). Both sides use the same, private cache directory, warmed by one untimed call first, so
the difference is the process start, JAX's import and the executor worker's start, which one
call pays once and eight calls pay eight times.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_cli_cases.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "pallaslab"]
CASES = [f"tests/kernels.py:{name}" for name in (
    "vector_add", "elementwise_1d", "elementwise_2d_add", "matmul_f32", "row_softmax",
    "layer_norm", "squeezed_dims", "partial_blocks")]
HELP_RUNS = 5


def seconds(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([*CLI, *argv], cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"pallaslab {' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    return elapsed


def measure() -> tuple[float, list[float], list[float]]:
    """(seconds of one call, of each separate call, of each --help)."""
    with tempfile.TemporaryDirectory(prefix="bench-cli-cases-") as cache:
        env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
               "PALLASLAB_CACHE_DIR": cache}
        seconds(["compare", *CASES, "--json"], env)  # warms the caches both sides read
        one_call = seconds(["compare", *CASES, "--json"], env)
        separate = [seconds(["compare", case, "--json"], env) for case in CASES]
        help_times = [seconds(["--help"], env) for _ in range(HELP_RUNS)]
    return one_call, separate, help_times


def main() -> None:
    one_call, separate, help_times = measure()
    eight = sum(separate)
    print(f"pallaslab compare, {len(CASES)} catalog cases (default executors):")
    print(f"  one call                   {one_call:7.2f} s")
    print(f"  {len(CASES)} separate calls           {eight:7.2f} s  "
          f"(each {min(separate):.2f} .. {max(separate):.2f} s)")
    print(f"  one call / {len(CASES)} calls          {one_call / eight:7.0%}   (goal <= 40%)")
    print(f"pallaslab --help (median of {HELP_RUNS})  {statistics.median(help_times):7.2f} s  "
          "(goal <= 0.5 s)")


if __name__ == "__main__":
    main()

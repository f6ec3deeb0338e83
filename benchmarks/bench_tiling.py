"""Capture + whole-grid tiling analysis of a 1024 x 1024 grid (1,048,576 programs), and at
the edges of the analysis limit.

Prints the time of capture + tiling + findings, the time of the straightforward alternative
(evaluating the index-map jaxprs program by program, timed on a sample and extrapolated),
their ratio, and the peak memory the analysis adds. Goals: < 2 s, >= 100x, < 1 GiB.

Then, side by side, each in a fresh process so its peak memory is its own: a grid just under
the whole-grid analysis limit (PALLASLAB_MAX_PROGRAMS, 2^24 programs by default), analysed in
chunks, and a grid of 10^9 programs, refused before anything of its size is allocated; plus
`pallaslab inspect` of the 10^9 grid end to end (goal: an answer within two minutes).

    .venv/bin/python benchmarks/bench_tiling.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.analysis import find, tile
from pallaslab.analysis.inspection import inspect_kernel
from pallaslab.analysis.tiling import max_programs
from pallaslab.model import _jax

GRID = (1024, 1024)
SAMPLE = 2000
UNDER_LIMIT = (4096, 4095)  # 16,773,120 programs: just under the default limit of 2^24
BILLION = (1000, 1000, 1000)


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def three_operands(x, y, grid=GRID):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    return pl.pallas_call(
        add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid,
        in_specs=[spec, pl.BlockSpec((8, 128), lambda i, j: (i, (j + i) % grid[1]))],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x, y)


def elementwise_3d(x):
    spec = pl.BlockSpec((8, 128), lambda i, j, k: (0, 0))
    return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=BILLION, in_specs=[spec, spec], out_specs=spec)(x, x)


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def analyse(x, grid=GRID):
    (kernel,) = pallaslab.capture(three_operands, x, x, grid)
    tiling = tile(kernel)
    return kernel, tiling, find(kernel, tiling)


def warm() -> None:
    """Warm JAX itself (first trace, CPU client) on a small grid so we time our own work."""
    small = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    analyse_small = pallaslab.capture(lambda a, b: pl.pallas_call(
        add_kernel, out_shape=small, grid=(8, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))] * 2,
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)))(a, b), small, small)
    tile(analyse_small[0])


def scenario(name: str) -> dict[str, float | int | str]:
    """One measurement in this (fresh) process: seconds, peak MiB added, what was answered."""
    warm()
    rss_before = max_rss_mib()
    t0 = time.perf_counter()
    if name == "under-limit":
        x = jax.ShapeDtypeStruct((UNDER_LIMIT[0] * 8, UNDER_LIMIT[1] * 128), jnp.float32)
        kernel, _, findings = analyse(x, UNDER_LIMIT)
        answer = f"analysed, findings {[f.code for f in findings]}"
    else:
        x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
        (kernel,) = pallaslab.capture(elementwise_3d, x)
        insp = inspect_kernel(kernel)
        answer = ", ".join(f"{f.severity} {f.code}" for f in insp.findings)
    seconds = time.perf_counter() - t0
    return {"programs": int(kernel.programs or 0), "seconds": seconds,
            "peak_mib": max_rss_mib() - rss_before, "answer": answer}


def run_scenario(name: str) -> dict[str, float | int | str]:
    out = subprocess.run([sys.executable, __file__, "--scenario", name], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def inspect_cli_seconds() -> float:
    """`pallaslab inspect --json` of the 10^9 grid, end to end (interpreter start included)."""
    case = f"{__file__}:billion_case"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pallaslab", "inspect", case, "--json"], check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def billion_case():
    return elementwise_3d, (jax.ShapeDtypeStruct((8, 128), jnp.float32),)


def limits(first: dict[str, float | int | str]) -> None:
    rows = [("1024 x 1024 (above, in-process)", GRID, None),
            ("4096 x 4095, just under the limit", UNDER_LIMIT, run_scenario("under-limit")),
            ("1000^3 = 10^9, refused", BILLION, run_scenario("billion"))]
    print(f"\nwhole-grid analysis limit: {max_programs():,} programs "
          "(PALLASLAB_MAX_PROGRAMS); each row in a fresh process")
    print(f"{'grid':<36}{'programs':>15}{'seconds':>9}{'peak MiB':>10}"
          f"{'B/program':>11}  answer")
    for label, _, r in rows:
        r = r or first
        per = r["peak_mib"] * 2**20 / r["programs"]  # type: ignore[operator]
        print(f"{label:<36}{r['programs']:>15,}{r['seconds']:>9.2f}"
              f"{r['peak_mib']:>10.1f}{per:>11.1f}  {r['answer']}")
    print(f"pallaslab inspect --json of the 10^9 grid, end to end: {inspect_cli_seconds():.2f} s "
          "(goal < 120 s)")


def main() -> dict[str, float | int | str]:
    x = jax.ShapeDtypeStruct((GRID[0] * 8, GRID[1] * 128), jnp.float32)
    warm()
    rss_before = max_rss_mib()

    t0 = time.perf_counter()
    kernel, tiling, findings = analyse(x)
    fast = time.perf_counter() - t0
    rss_after = max_rss_mib()

    programs = tiling.programs
    rng = np.random.default_rng(0)
    steps = rng.choice(programs, size=SAMPLE, replace=False)
    origins = list(tiling.operands)
    t0 = time.perf_counter()
    for step in steps:
        program = tiling.program_at(int(step))
        for origin in origins:
            _jax.eval_index_map_once(kernel, origin, program)
    slow = (time.perf_counter() - t0) / SAMPLE * programs

    fetches = {o: t.fetches for o, t in tiling.operands.items()}
    print(f"grid {GRID} = {programs:,} programs, {len(origins)} BlockSpec operands")
    print(f"fetches: {fetches}; findings: {[f.code for f in findings]}")
    print(f"capture + tiling + findings : {fast:8.3f} s   (goal < 2 s)")
    print(f"program by program (extrap.): {slow:8.1f} s   ({SAMPLE} programs sampled)")
    print(f"speed-up                    : {slow / fast:8.0f} x (goal >= 100x)")
    print(f"peak memory added           : {rss_after - rss_before:8.1f} MiB (goal < 1024 MiB)")
    return {"programs": programs, "seconds": fast, "peak_mib": rss_after - rss_before,
            "answer": f"analysed, findings {[f.code for f in findings]}"}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--scenario"]:
        print(json.dumps(scenario(sys.argv[2])))
    else:
        limits(main())

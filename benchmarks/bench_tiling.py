"""Capture + whole-grid tiling analysis of a 1024 x 1024 grid (1,048,576 programs).

Prints the time of capture + tiling + findings, the time of the straightforward alternative
(evaluating the index-map jaxprs program by program, timed on a sample and extrapolated),
their ratio, and the peak memory the analysis adds. Goals: < 2 s, >= 100x, < 1 GiB.

    .venv/bin/python benchmarks/bench_tiling.py
"""

from __future__ import annotations

import os
import resource
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.analysis import find, tile
from pallaslab.model import _jax

GRID = (1024, 1024)
SAMPLE = 2000


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def three_operands(x, y):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    return pl.pallas_call(
        add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=GRID,
        in_specs=[spec, pl.BlockSpec((8, 128), lambda i, j: (i, (j + i) % GRID[1]))],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x, y)


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def analyse(x):
    (kernel,) = pallaslab.capture(three_operands, x, x)
    tiling = tile(kernel)
    return kernel, tiling, find(kernel, tiling)


def main() -> None:
    x = jax.ShapeDtypeStruct((GRID[0] * 8, GRID[1] * 128), jnp.float32)
    # Warm JAX itself (first trace, CPU client) on a small grid so we time our own work.
    small = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    analyse_small = pallaslab.capture(lambda a, b: pl.pallas_call(
        add_kernel, out_shape=small, grid=(8, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))] * 2,
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)))(a, b), small, small)
    tile(analyse_small[0])
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


if __name__ == "__main__":
    main()

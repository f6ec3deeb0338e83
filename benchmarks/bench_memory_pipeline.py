"""Speed of the memory/pipeline analyses: prints figures and ratios against the goals.

- the pipeline model for a 1,048,576-step grid (goal < 2 s), split into the tiling table
  (index maps over the grid), per-step durations and the max-plus simulation;
- reading a CPU profile with ~100k events (goal < 2 s);
- occupancy for every kernel in the catalog on v5e and v6e.

Run: JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_memory_pipeline.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

import pallaslab
from pallaslab.analysis.chips import chip
from pallaslab.analysis.cost import step_cost
from pallaslab.analysis.occupancy import occupancy
from pallaslab.analysis.pipeline import simulate, step_times
from pallaslab.analysis.tiling import tile
from pallaslab.execute.profile import profile, read_trace


def scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def grid_kernel(steps_a: int, steps_b: int, rows: int = 8):
    def fn(x):
        return pl.pallas_call(
            scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(steps_a, steps_b),
            in_specs=[pl.BlockSpec((rows, 128), lambda i, j: (i, j))],
            out_specs=pl.BlockSpec((rows, 128), lambda i, j: (i, j)),
        )(x)

    return fn, (jax.ShapeDtypeStruct((steps_a * rows, steps_b * 128), jnp.float32),)


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def bench_pipeline() -> None:
    fn, args = grid_kernel(1024, 1024)
    k = pallaslab.capture(fn, *args)[0]
    v5e = chip("v5e")
    t, t_tile = timed(lambda: tile(k))
    times, t_steps = timed(lambda: step_times(k, v5e, t, step_cost(k)))
    (events, summary, _), t_sim = timed(lambda: simulate(
        times.copy_in, times.compute, times.write_back, serial_in=times.serial_in,
        serial_out=times.serial_out))
    total = t_tile + t_steps + t_sim
    print(f"pipeline model, {summary.steps:,} steps, {len(events):,} events: "
          f"{total:.2f} s (tiling {t_tile:.2f} s, step times {t_steps:.2f} s, "
          f"simulation {t_sim:.2f} s); goal 2 s -> {total / 2:.2f}x of budget")
    print(f"  predicted {summary.predicted_time * 1e3:.2f} ms on v5e, compute-bound "
          f"{summary.compute_bound_fraction:.1%}, first stall at step {summary.first_stall_step}")


def bench_profile() -> None:
    from kernels import matmul  # pl.when bodies: XLA runs the grid loop thunk by thunk

    x = jax.random.normal(jax.random.key(0), (1024, 2048))
    y = jax.random.normal(jax.random.key(1), (2048, 1024))
    d = tempfile.mkdtemp()
    p, t_run = timed(lambda: profile(matmul, x, y, trace_dir=d))  # 1,024 interpreted steps
    assert p.trace_file is not None
    from jax.profiler import ProfileData

    raw = sum(1 for pl_ in ProfileData.from_file(p.trace_file).planes for ln in pl_.lines
              for _ in ln.events)
    ev, t_read = timed(lambda: read_trace(p.trace_file))
    print(f"profile parse: {raw:,} trace events -> {len(ev):,} kernel events "
          f"({p.steps:,} steps) in {t_read:.2f} s; goal 2 s -> {t_read / 2:.2f}x of budget "
          f"(capture incl. interpreted run: {t_run:.1f} s)")


def bench_occupancy() -> None:
    from kernels import CATALOG

    cases = [e.case()[:2] for e in CATALOG.values() if "tpu" in e.tags]
    kernels = [k for fn, args in cases for k in pallaslab.capture(fn, *args)]
    _, t = timed(lambda: [occupancy(k, c) for k in kernels for c in ("v5e", "v6e")])
    print(f"occupancy: {len(kernels)} kernels x 2 chips in {t * 1e3:.1f} ms")


if __name__ == "__main__":
    bench_pipeline()
    bench_profile()
    bench_occupancy()

"""Executors, compare and stepper on an f32 matmul 1024^3 with 128^3 blocks (grid 8x8x8).

Prints, in one run: each executor's execution time against `jnp.dot` (ratios), the median
stepper step after warm-up (goal < 20 ms), and the stepper's memory growth over 512 steps
(goal: proportional to the blocks touched, not to the arrays).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_execute.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kernels import matmul, rand

import pallaslab
from pallaslab.execute import run

N, BLOCK = 1024, 128


def time_jnp_dot(x: jax.Array, y: jax.Array) -> float:
    f = jax.jit(jnp.dot)
    f(x, y).block_until_ready()
    best = []
    for _ in range(5):
        t = time.perf_counter()
        f(x, y).block_until_ready()
        best.append(time.perf_counter() - t)
    return min(best)


def main() -> None:
    x, y = rand((N, N)), rand((N, N), seed=1)
    base = time_jnp_dot(x, y)
    print(f"f32 matmul {N}^3, {BLOCK}-blocks (grid {N // BLOCK}^3 = {(N // BLOCK) ** 3} programs)")
    print(f"{'jnp.dot':16s} {base * 1e3:9.1f} ms   1x")
    for name in ("interpret", "tpu-interpret", "device"):
        result = run(matmul, x, y, executor=name)
        if result.unavailable:
            print(f"{name:16s} unavailable: {result.unavailable}")
            continue
        print(f"{name:16s} {result.wall_time * 1e3:9.1f} ms   {result.wall_time / base:6.0f}x"
              f"   (compile {result.compile_time:.2f} s)")
    ref = run(matmul, x, y, executor="reference", reference=jnp.dot)
    print(f"{'reference':16s} {ref.wall_time * 1e3:9.1f} ms   {ref.wall_time / base:6.1f}x")

    t = time.perf_counter()
    st = pallaslab.step(matmul, x, y)
    print(f"\nstepper: created in {time.perf_counter() - t:.2f} s")
    st.step(8)  # warm-up (compiles the one-program function)
    times = []
    for _ in range(128):
        t = time.perf_counter()
        st.step()
        times.append(time.perf_counter() - t)
    print(f"median step after warm-up: {statistics.median(times) * 1e3:.2f} ms (goal < 20 ms)")
    t = time.perf_counter()
    st.back(64)
    print(f"back(64): {(time.perf_counter() - t) * 1e3:.2f} ms")

    st.reset()
    st.step(512)
    block = BLOCK * BLOCK * 4
    hist = st.history_nbytes()
    print(f"history after 512 steps: {hist / 2**20:.1f} MiB = {hist / 512 / block:.2f} "
          f"blocks/step of {block // 1024} KiB (output block + f32 scratch when they change); "
          f"one full copy of the arrays would be {3 * N * N * 4 / 2**20:.0f} MiB per step")
    st.reset()
    st.step(64)
    h64 = st.history_nbytes()
    print(f"growth is linear in steps: 64 steps {h64 / 2**20:.2f} MiB, 512 steps "
          f"{hist / 2**20:.2f} MiB (ratio {hist / h64:.1f}, steps ratio 8.0)")


if __name__ == "__main__":
    main()

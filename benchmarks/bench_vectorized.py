"""The `vectorized` executor against `jnp` (the physical limit here) and `interpret`, in one run.

Kernels (issue 14's): f32 matmul 1024^3 with 128-blocks, JAX's TPU flash attention (batch 1,
4 heads, 1024 x 64, f32) and a layer norm (8192 x 1024 f32, 256-row blocks). Figures are
medians of warm runs of the compiled computation (compile time excluded, printed apart).
`interp/jnp` bounds what `interp/vec` can reach: the vectorized run cannot beat `jnp` by much,
so "20x faster than interpret" is out of reach wherever interpret is under ~20x `jnp`.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_vectorized.py
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from jax.experimental import pallas as pl
from kernels import layer_norm_kernel, matmul, rand

from pallaslab.execute.executors.interpret import InterpretExecutor
from pallaslab.execute.executors.vectorized import VectorizedExecutor
from pallaslab.execute.prepared import prepare
from pallaslab.execute.worker.running import execute_here

RUNS = 5


def median_time(f: Callable[..., Any], *args: Any) -> float:
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def layer_norm(x: jax.Array, w: jax.Array, b: jax.Array, block: int = 256) -> jax.Array:
    n, d = x.shape
    row = pl.BlockSpec((block, d), lambda i: (i, 0))
    vec = pl.BlockSpec((1, d), lambda i: (0, 0))
    return pl.pallas_call(layer_norm_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(n // block,), in_specs=[row, vec, vec], out_specs=row)(x, w, b)


def jnp_layer_norm(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b


def jnp_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)


def cases() -> list[tuple[str, Callable[..., Any], Callable[..., Any], tuple[Any, ...]]]:
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    n = 1024
    x, y = rand((n, n)), rand((n, n), seed=1)
    q, k, v = (rand((1, 4, 1024, 64), seed=s) for s in range(3))
    flash = functools.partial(fa.flash_attention, sm_scale=1.0)
    xs, w, b = rand((8192, 1024)), rand((1, 1024), seed=1), rand((1, 1024), seed=2)
    return [
        ("matmul 1024^3 f32, 128-blocks", matmul, jnp.dot, (x, y)),
        ("TPU flash attention 1x4x1024x64 f32", flash, jnp_attention, (q, k, v)),
        ("layer norm 8192x1024 f32", layer_norm, jnp_layer_norm, (xs, w, b)),
    ]


def executor_time(executor: Any, prepared: Any) -> tuple[float, float, Any]:
    """(median wall, compile, last result): warm runs of the executor's own computation."""
    walls = []
    result = None
    for _ in range(RUNS):
        result = execute_here(executor, prepared, float("inf"))
        if result.outputs is None:
            raise RuntimeError(f"{executor.name}: {result.error or result.unavailable}")
        walls.append(result.wall_time)
    assert result is not None
    return statistics.median(walls), result.compile_time, result


def main() -> None:
    print(f"{'kernel':38s} {'jnp':>9s} {'vectorized':>11s} {'interpret':>10s} "
          f"{'vec/jnp':>8s} {'interp/vec':>10s} {'interp/jnp':>10s}  max |vec - interp|")
    for title, fn, ref, args in cases():
        base = median_time(jax.jit(ref), *args)
        prepared = prepare(fn, args)
        vec, vec_compile, vres = executor_time(VectorizedExecutor(), prepared)
        interp, _, ires = executor_time(InterpretExecutor(), prepared)
        diff = max(float(np.nanmax(np.abs(a.astype(np.float64) - b))) for a, b in
                   zip(vres.outputs, ires.outputs, strict=True))
        print(f"{title:38s} {base * 1e3:7.1f}ms {vec * 1e3:9.1f}ms {interp * 1e3:8.1f}ms "
              f"{vec / base:7.1f}x {interp / vec:9.1f}x {interp / base:9.1f}x  {diff:.2g}"
              f"   (vectorized compile {vec_compile:.2f} s; {'; '.join(vres.notes)})")


if __name__ == "__main__":
    main()

"""A repeated `pallaslab compare` in a fresh process against the plain script a user would
write (issue 28): a 512^2 f32 matmul (JAX's matmul guide kernel, 128-blocks, `interpret=True`)
against `jnp.dot`, checked with `np.allclose`. Goal: pallaslab within 1.2x of the script, end to
end (Python's start, JAX's import, the runs, the verdict).

Both sides run in fresh processes, each several times (medians); pallaslab's private cache
directory is warmed by one untimed call first, as a user's repeated call finds it.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_compare_script.py

This file is also the case (`bench_compare_script.py:matmul_512`), its reference, and the plain
script (`python benchmarks/bench_compare_script.py plain`).
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()
N = 512
RUNS = 3


def _kernel_and_args():  # imported here: the benchmark's own process never imports JAX
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(ROOT / "tests"))
    from kernels import matmul

    x = jax.random.normal(jax.random.key(0), (N, N), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (N, N), jnp.float32)
    return functools.partial(matmul, interpret=True), (x, y)


def matmul_512():
    """The case: the kernel as the user wrote it (interpret=True), on concrete arrays."""
    return _kernel_and_args()


def reference(x, y):
    import jax.numpy as jnp

    return jnp.dot(x, y, precision="highest")


def plain() -> int:
    """What a user writes without pallaslab: run interpreted, run the reference, allclose."""
    import jax
    import numpy as np

    fn, (x, y) = _kernel_and_args()
    got = np.asarray(jax.block_until_ready(fn(x, y)))
    want = np.asarray(jax.jit(reference)(x, y))
    ok = np.allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    print("allclose" if ok else "MISMATCH")
    return 0 if ok else 1


def seconds(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n"
                         f"{done.stderr}")
    return elapsed


def measure() -> tuple[float, float]:
    """(median seconds of the plain script, of a repeated `pallaslab compare`)."""
    case = f"{HERE.relative_to(ROOT)}"
    compare = [sys.executable, "-m", "pallaslab", "compare", f"{case}:matmul_512",
               "--executors", "interpret,reference", "--reference", f"{case}:reference"]
    script = [sys.executable, str(HERE), "plain"]
    with tempfile.TemporaryDirectory(prefix="bench-compare-script-") as cache:
        env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
               "PALLASLAB_CACHE_DIR": cache}
        seconds(compare, env)  # the repeated call finds the caches this one filled
        seconds(script, env)
        plain_s, lab_s = [], []
        for _ in range(RUNS):  # interleaved: a busy machine slows both alike
            plain_s.append(seconds(script, env))
            lab_s.append(seconds(compare, env))
    return statistics.median(plain_s), statistics.median(lab_s)


def main() -> None:
    plain_s, lab_s = measure()
    print(f"512^2 f32 matmul, interpret=True vs jnp.dot, fresh processes (medians of {RUNS}):")
    print(f"  plain script (run, reference, allclose)  {plain_s:6.2f} s")
    print(f"  pallaslab compare (repeated)             {lab_s:6.2f} s  "
          f"{lab_s / plain_s:5.2f}x  (goal <= 1.2x)")


if __name__ == "__main__":
    if sys.argv[1:] == ["plain"]:
        sys.exit(plain())
    main()

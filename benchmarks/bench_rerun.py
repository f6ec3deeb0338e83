"""`%%pallas` re-run cost in-process (issue 10): what the kernel does before Lab can draw.

A real IPython InteractiveShell runs `%%pallas --tab grid` on the 1024 x 1024 f32 matmul
(tests/kernels.py `matmul`, 128 blocks, interpret=True) as the in-Lab benchmark does; the
display makes the workbench's mimebundle at once, as the kernel does before sending it. Per
run: the cell (trace, workbench, value dispatched), of which the mimebundle, then the wait
for the value itself, and the process's CPU time (all threads: robust on a loaded machine).
Cold is the first run; warm is the median of the re-runs, which reuse the compiled value run
and index maps (their cache statistics are printed).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_rerun.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

CELL = "%%pallas --tab grid\nmatmul(x, y, interpret=True)"
SETUP = ("from kernels import matmul, rand\n"
         "x, y = rand((1024, 1024)), rand((1024, 1024), seed=1)\n"
         "x.block_until_ready(); y.block_until_ready();")
COLUMNS = ("cell", "of which bundle", "then value", "cpu")


def shell_with_bundles() -> tuple[object, list[float]]:
    """A shell with pallaslab loaded whose `display` makes the mimebundle right away (timed)."""
    import IPython.display
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    sh = InteractiveShell.instance()
    with capture_output():
        sh.run_cell("%load_ext pallaslab")
        assert sh.run_cell(SETUP).success
    bundle_s: list[float] = []

    def display(obj, **kw):
        t0 = time.perf_counter()
        obj._repr_mimebundle_()
        bundle_s.append(time.perf_counter() - t0)

    IPython.display.display = display
    return sh, bundle_s


def one_run(sh, bundle_s: list[float]) -> tuple[float, ...]:
    import jax
    from IPython.utils.capture import capture_output

    w0, c0 = time.perf_counter(), time.process_time()
    with capture_output():
        result = sh.run_cell(CELL, store_history=False)
    assert result.success, result.error_in_exec
    w1 = time.perf_counter()
    jax.block_until_ready(result.result)
    return w1 - w0, bundle_s[-1], time.perf_counter() - w1, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="warm re-runs (default 7)")
    opts = parser.parse_args()
    sh, bundle_s = shell_with_bundles()
    cold = one_run(sh, bundle_s)
    warm = [one_run(sh, bundle_s) for _ in range(opts.runs)]
    median = [statistics.median(w[i] for w in warm) for i in range(len(COLUMNS))]
    print(f"{'ms':24}" + "".join(f"{c:>17}" for c in COLUMNS))
    for label, row in (("cold", cold), (f"warm (median of {opts.runs})", median)):
        print(f"{label:24}" + "".join(f"{1000 * v:17.0f}" for v in row))
    from pallaslab.model._jax.compiled import equation_cache_stats
    from pallaslab.model._jax.index_maps import index_map_cache_stats

    print(f"value run: {equation_cache_stats()}")
    print(f"index maps: {index_map_cache_stats()}")


if __name__ == "__main__":
    main()

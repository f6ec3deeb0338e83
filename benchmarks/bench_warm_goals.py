"""Every goal of issue 28 (the warm loop), measured in one run and printed side by side:

- warm `pallaslab.run` of a 1024^3 f32 matmul against jitted `jnp.dot`, end to end (goal <= 3x;
  `bench_warm_loop.py`);
- a repeated `pallaslab compare` in a fresh process against the plain script a user would write
  (goal <= 1.2x; `bench_compare_script.py`);
- `pallaslab compare` of 8 cases in one call against 8 calls (goal <= 40%), and
  `pallaslab --help` (goal <= 0.5 s; `bench_cli_cases.py`).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_warm_goals.py

Wall-clock ratios on a shared machine move with its load: the machine's load average is
printed with them.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_cli_cases
import bench_compare_script
import bench_warm_loop


def main() -> None:
    load = os.getloadavg()[0]
    warm = bench_warm_loop.measure()
    plain_s, lab_s = bench_compare_script.measure()
    one_call, separate, help_times = bench_cli_cases.measure()
    help_s = statistics.median(help_times)
    rows = [
        ("warm pallaslab.run / jitted jnp.dot (1024^3 matmul)",
         f"{warm['warm'] * 1e3:.1f} ms / {warm['base'] * 1e3:.1f} ms",
         warm["warm"] / warm["base"], "x", 3.0),
        ("repeated pallaslab compare / plain script (512^2)",
         f"{lab_s:.2f} s / {plain_s:.2f} s", lab_s / plain_s, "x", 1.2),
        (f"compare of {len(separate)} cases: one call / {len(separate)} calls",
         f"{one_call:.2f} s / {sum(separate):.2f} s", one_call / sum(separate), "%", 0.4),
        ("pallaslab --help (median)", f"{help_s:.2f} s", help_s, "s", 0.5),
    ]
    print(f"issue 28 goals (load average {load:.1f} at the start, "
          f"{os.cpu_count()} CPUs)")
    for name, figures, value, unit, goal in rows:
        shown = f"{value:.0%}" if unit == "%" else f"{value:.2f}{unit}"
        limit = f"{goal:.0%}" if unit == "%" else f"{goal:g}{unit}"
        verdict = "met" if value <= goal else "NOT met"
        print(f"  {name:52s} {figures:>22s}  {shown:>7s}  goal <= {limit:<5s} {verdict}")


if __name__ == "__main__":
    main()

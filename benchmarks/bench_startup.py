"""Start-up: what each CLI step costs from a cold process, against `import jax` (the floor).

Prints medians of RUNS fresh processes each, measured side by side in one run, and
pallaslab's own share (the step minus `import jax`).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_startup.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 5
ROOT = Path(__file__).resolve().parent.parent
CASE = "tests/kernels.py:matmul_f32"
PY = sys.executable
CLI = [PY, "-m", "pallaslab"]

STEPS = {
    "import jax": [PY, "-c", "import jax"],
    "import pallaslab": [PY, "-c", "import pallaslab"],
    "pallaslab --help": [*CLI, "--help"],
    f"pallaslab inspect {CASE}": [*CLI, "inspect", CASE],
    f"pallaslab check {CASE}": [*CLI, "check", CASE],
}


def median_seconds(cmd: list[str]) -> float:
    times = []
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    floor = None
    print(f"{'step':48s} {'median':>8s} {'own share':>10s}   ({RUNS} cold processes each)")
    for name, cmd in STEPS.items():
        seconds = median_seconds(cmd)
        floor = seconds if floor is None else floor
        share = "" if name == "import jax" else f"{seconds - floor:9.2f}s"
        print(f"{name:48s} {seconds:7.2f}s {share:>10s}")


if __name__ == "__main__":
    main()

"""The differential fuzzer's throughput (tests/fuzz): the same generated kernels judged one by
one (window 1: a compare and a check per kernel) and in windows (`judge_many`: correct kernels
and mutants compared in batches), each in a fresh process with its own empty JAX compile
cache, so neither run reuses the other's compiled computations.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_fuzz.py [--kernels N] [--seed S]

Prints per way kernels/s, CPU seconds per kernel (the process and its executor worker; the
figure to trust on a shared machine) and its campaign line (the verdicts must be the same).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE_RUN = """
import sys
from fuzz.campaign import run_campaign
t = run_campaign({seed}, seconds=float("inf"), max_kernels={kernels}, window={window})
print(f"{{len(t.verdicts) / t.seconds:.2f}}")
print(t.summary_line())
"""


def campaign(seed: int, kernels: int, window: int) -> tuple[float, float, str]:
    """(kernels/s, CPU s per kernel, campaign line) of a fresh process judging (seed,
    0..kernels-1)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as cache:
        env = os.environ | {"PYTHONPATH": str(ROOT / "tests"), "PALLASLAB_CACHE_DIR": cache,
                            "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
        code = ONE_RUN.format(seed=seed, kernels=kernels, window=window)
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(out[-2]), cpu / kernels, out[-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kernels", type=int, default=96)
    p.add_argument("--seed", type=int, default=20240601)
    args = p.parse_args()
    for name, window in (("one by one", 1), ("windows of 24", 24)):
        rate, cpu, line = campaign(args.seed, args.kernels, window)
        print(f"{name:14} {rate:5.2f} kernels/s  {cpu:5.2f} CPU s/kernel  {line}", flush=True)


if __name__ == "__main__":
    main()

"""The differential fuzzer's throughput (tests/fuzz) before and after issue 43's speed-ups,
side by side on the same kernels: (seed, 0..N-1) drawn from the three original families
(the grammar draws them as it did before the tpu-pipeline family).

- before: the fuzzer as first committed (3b875ea, read from git), one process;
- one process: today's fuzzer, one by one (compare and check share one trace);
- two shards: today's fuzzer as `make test` runs it, the kernels split over two processes
  at once (pytest-xdist, tests/test_fuzz.py and tests/test_fuzz_shard2.py);
- batches of 8: `judge_many(batch=8)`, one process, for the record (slower on 2 cores).

Each run is a fresh process with its own empty compile cache, so none reuses another's work.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_fuzz.py [--kernels N] [--seed S]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "3b875ea"
FAMILIES = ("tpu-block", "tpu-dma", "gpu-triton")
ONE_RUN = """
from fuzz.campaign import run_campaign
t = run_campaign({seed}, seconds=float("inf"), max_kernels={kernels}, start={start},
                 families={families!r}{extra})
print(t.summary_line())
"""


def start(tests: Path, cache: str, code: str) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(tests), "PALLASLAB_CACHE_DIR": cache,
                        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE)


def timed(tests: Path, seed: int, kernels: int, shards: int = 1, extra: str = "") -> str:
    """kernels/s and the campaign line(s) of `shards` processes judging the kernels at once."""
    per = kernels // shards
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        runs = [start(tests, cache, ONE_RUN.format(seed=seed, kernels=per, start=n * per,
                                                   families=FAMILIES, extra=extra))
                for n in range(shards)]
        lines = [run.communicate()[0].strip().splitlines()[-1] for run in runs]
        seconds = time.perf_counter() - t0
    return f"{per * shards / seconds:5.2f} kernels/s  " + "; ".join(lines)


def old_fuzzer(folder: Path) -> Path:
    """tests/fuzz as of BEFORE, written under `folder` (its tests/ for PYTHONPATH)."""
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{BEFORE}:tests/fuzz"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.split()
    (folder / "fuzz").mkdir()
    for name in names:
        text = subprocess.run(["git", "show", f"{BEFORE}:tests/fuzz/{name}"], cwd=ROOT,
                              check=True, capture_output=True, text=True).stdout
        (folder / "fuzz" / name).write_text(text)
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kernels", type=int, default=64)
    p.add_argument("--seed", type=int, default=20240601)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as old:
        print(f"before        {timed(old_fuzzer(Path(old)), args.seed, args.kernels)}",
              flush=True)
    tests = ROOT / "tests"
    print(f"one process   {timed(tests, args.seed, args.kernels)}", flush=True)
    print(f"two shards    {timed(tests, args.seed, args.kernels, shards=2)}", flush=True)
    print(f"batches of 8  {timed(tests, args.seed, args.kernels, extra=', batch=8')}",
          flush=True)


if __name__ == "__main__":
    main()

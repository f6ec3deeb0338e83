"""Multi-device runs on simulated CPU devices (issue 13): a ring all-reduce of one (1024, 1024)
f32 shard per device, run with `pallaslab.run(..., devices=N)` (a worker process with N CPU
devices, TPU interpret mode, the DMA record collected), and the Devices view's payload size.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_devices.py [--devices 4 16]

Goals: under 30 s for 4 devices on a 2-core machine; payload under 2 MB at 16 devices. The first
run on a device count includes starting its worker (JAX import); the second reuses it.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from catalog import rand
from kernels_multi import _ring_sum

import pallaslab

SHARD = (1024, 1024)


def measure(devices: int) -> None:
    fn = functools.partial(_ring_sum, scatter=False)
    x = rand((devices * SHARD[0], SHARD[1]))
    wb = pallaslab.Workbench(pallaslab.capture(fn, x))
    for label in ("first (starts the worker)", "second"):
        t0 = time.perf_counter()
        result = pallaslab.run(fn, x, devices=devices, timeout=900)
        seconds = time.perf_counter() - t0
        record = result.device_record
        print(f"{devices:>3} devices, {label:<26} {result.status:<7} {seconds:7.2f} s  "
              f"run {result.wall_time:6.2f} s  DMAs {len(record.transfers) if record else 0:>5}"
              f"  {record.remote_bytes() / 2**20 if record else 0:8.1f} MiB between devices")
    payload = wb.view("devices", result=result).payload()
    size = len(json.dumps(payload))
    print(f"{devices:>3} devices: Devices view payload {size / 1e6:.3f} MB "
          f"({len(payload['transfers'])} arrows, {len(payload['semaphores'])} semaphore ticks)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[4, 16])
    for n in parser.parse_args().devices:
        measure(n)


if __name__ == "__main__":
    main()

"""The device check's child process: finds the GPU, then checks kernels one by one, appending
one JSON line per event to a progress file the supervisor reads (`check.py`).

    python -m pallaslab.device_check.child --out DIR --progress FILE --kernel-limit S CASE...

Events: {"event": "device", "device": {...} | null, "reason": str | null}, then per kernel
{"event": "start", "case": spec} and {"event": "done", "case": spec, "report": {...}}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any


def gpu_facts() -> tuple[dict[str, Any] | None, str | None]:
    """(the first GPU's facts, None), or (None, why there is none)."""
    import jax
    import jaxlib

    try:
        gpus = jax.devices("gpu")
    except RuntimeError as err:
        gpus, why = [], str(err).splitlines()[0] if str(err) else "no GPU backend"
    else:
        why = "JAX's GPU backend has no devices"
    if not gpus:
        try:
            backends = ", ".join(sorted({d.platform for d in jax.devices()}))
        except RuntimeError:
            backends = "none"
        return None, (f"no NVIDIA GPU is attached: JAX {jax.__version__}'s backends here are "
                      f"{backends} (asked for a GPU: {why[:160]}); run `make device-check` "
                      "on a GPU machine with a CUDA-enabled JAX")
    gpu = gpus[0]
    stats = gpu.memory_stats() or {}
    return {"name": gpu.device_kind, "platform": gpu.platform, "count": len(gpus),
            "compute_capability": getattr(gpu, "compute_capability", None),
            "memory_bytes": stats.get("bytes_limit"), "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "python": sys.version.split()[0]}, None


def dry_run_facts(subject: str) -> tuple[dict[str, Any], None]:
    """A dry run's "device": the CPU, with `subject` run in the device executor's place."""
    import jax
    import jaxlib

    return {"name": f"dry run: {subject} in the device executor's place",
            "platform": jax.default_backend(), "count": 0, "compute_capability": None,
            "memory_bytes": None, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "python": sys.version.split()[0]}, None


def capability(device: dict[str, Any]) -> tuple[int, int] | None:
    """"9.0" -> (9, 0); None when the device does not say."""
    text = device.get("compute_capability")
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pallaslab.device_check.child")
    parser.add_argument("--out", required=True)
    parser.add_argument("--progress", required=True)
    parser.add_argument("--kernel-limit", type=float, required=True)
    parser.add_argument("--subject", default="device")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args(argv)
    progress = open(args.progress, "a", buffering=1)  # noqa: SIM115 - one line per event

    def say(**event: Any) -> None:
        progress.write(json.dumps(event, allow_nan=False) + "\n")
        progress.flush()
        os.fsync(progress.fileno())

    device, why = gpu_facts() if args.subject == "device" else dry_run_facts(args.subject)
    say(event="device", device=device, reason=why)
    if device is None:
        return 0
    from pallaslab.device_check.cases import case_for
    from pallaslab.device_check.kernel_check import check_kernel
    from pallaslab.execute.worker.isolation import prewarm_worker

    prewarm_worker()  # the interpreters' worker starts while the first kernel is captured

    for spec in args.cases:
        say(event="start", case=spec)
        report = check_kernel(case_for(spec), args.out, args.kernel_limit,
                              subject=args.subject, capability=capability(device))
        say(event="done", case=spec, report=report.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())

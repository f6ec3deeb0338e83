"""The Mosaic GPU compiler worker: a process of our own with XLA's CUDA plugin on its path.

The plugin (~500 MB) stays out of the user's process: JAX would load it at start-up there and
complain about the absent cuDNN. Here it compiles ahead of time for a compile-only CUDA device
(a `GpuTargetConfigProto`; no GPU, no libcuda); Mosaic GPU's custom call runs its pipeline and
ptxas then, and `MOSAIC_GPU_DUMP_*` (set by the parent) write the PTX, `ptxas -v` and SASS.
Protocol: one JSON request per line on stdin, one JSON response per line on the file
descriptor that was stdout at start (fds 1 and 2 go to a log file).

Request:  {"target_config": "<GpuTargetConfigProto text>", "hlo": "<StableHLO text>"}
Response: {"ok": bool, "error": str | null, "files": {name: text}, "log": [str],
           "seconds": float}
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

# What the dump holds besides the PTX/ptxas/SASS: the module with its launch (shared memory).
_KEEP = (".ptx", ".ptxas", ".sass", ".sass_ctrl", ".resources.txt", "layout_inference.txt")


def main() -> int:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    log_path = Path(os.environ["PALLASLAB_WORKER_LOG"])
    os.dup2(2, 1)  # C++ prints to fd 1 as well; keep the protocol channel clean
    dump_dir = Path(os.environ["PALLASLAB_MOSAIC_GPU_DUMP"])
    # Loads jax_cuda12_plugin's Mosaic GPU runtime (libmosaic_gpu_runtime.so), whose symbols
    # the compiled kernel's host code is linked against; without it: "Failed to lookup host
    # symbol ... _mosaic_gpu".
    import jax.experimental.pallas.mosaic_gpu  # noqa: F401

    from pallaslab.model import _jax

    devices: dict[str, Any] = {}
    protocol.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        offset = log_path.stat().st_size if log_path.exists() else 0
        response = _compile(_jax, devices, request, dump_dir)
        response["log"] = _new_log_lines(log_path, offset)
        protocol.write(json.dumps(response) + "\n")
    return 0


def _compile(_jax: Any, devices: dict[str, Any], request: dict, dump_dir: Path) -> dict:
    shutil.rmtree(dump_dir, ignore_errors=True)
    dump_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    config = request["target_config"]
    try:
        if config not in devices:
            from jax.experimental import topologies

            devices[config] = topologies.get_topology_desc(
                platform="cuda", target_config=config, topology="1x1x1").devices[0]
        _jax.aot_compile_stablehlo(request["hlo"], devices[config])
        ok, error = True, None
    except Exception as err:  # the compiler's verdict
        ok, error = False, f"{type(err).__name__}: {err}"
    seconds = time.perf_counter() - start
    files = {p.name: p.read_text(errors="replace") for p in sorted(dump_dir.iterdir())
             if p.is_file() and p.name.endswith(_KEEP)}
    return {"ok": ok, "error": error, "files": files, "seconds": seconds}


def _new_log_lines(path: Path, offset: int) -> list[str]:
    if not path.exists():
        return []
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines() if line.strip()][:50]


if __name__ == "__main__":
    sys.exit(main())

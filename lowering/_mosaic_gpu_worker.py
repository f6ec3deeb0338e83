"""The Mosaic GPU compiler worker: a process of our own with XLA's CUDA plugin on its path.

The plugin (~500 MB) stays out of the user's process: JAX would load it at start-up there and
complain about the absent cuDNN. Here it compiles ahead of time for a compile-only CUDA device
(a `GpuTargetConfigProto`; no GPU, no libcuda); Mosaic GPU's custom call runs its pipeline and
ptxas then, and `MOSAIC_GPU_DUMP_*` (set by the parent) write the PTX, `ptxas -v` and SASS.
Protocol: `lowering.compiler_worker`.

Request:  {"target_config": "<GpuTargetConfigProto text>", "hlo": "<StableHLO text>"}
Response: {"ok": bool, "error": str | null, "files": {name: text}, "log": [str],
           "seconds": float}
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pallaslab.lowering.compiler_worker import serve

# What the dump holds besides the PTX/ptxas/SASS: the module with its launch (shared memory).
_KEEP = (".ptx", ".ptxas", ".sass", ".sass_ctrl", ".resources.txt", "layout_inference.txt")


def main() -> int:
    dump_dir = Path(os.environ["PALLASLAB_MOSAIC_GPU_DUMP"])
    # Loads jax_cudaN_plugin's Mosaic GPU runtime (libmosaic_gpu_runtime.so; N the CUDA major,
    # 12 or 13), whose symbols the compiled kernel's host code is linked against; without it:
    # "Failed to lookup host symbol ... _mosaic_gpu".
    import jax.experimental.pallas.mosaic_gpu  # noqa: F401

    from pallaslab.model import _jax

    devices: dict[str, Any] = {}
    return serve(lambda request: _compile(_jax, devices, request, dump_dir))


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


if __name__ == "__main__":
    sys.exit(main())

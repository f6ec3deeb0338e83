"""The TPU compiler worker: a process of our own that runs libtpu's AOT compiler.

libtpu reads LIBTPU_INIT_ARGS once per process (the Mosaic dump directory is one of them) and
prints screens of initialisation warnings from C++ straight to file descriptors 1 and 2; so it
lives here, away from the user's process (protocol: `lowering.compiler_worker`).

Request:  {"topology": "v5e:1x1", "hlo": "<StableHLO text>", "dumps": true, "partitions": 1}
          (partitions > 1: the module is one SPMD program over the topology's first N devices)
Response: {"ok": bool, "error": str | null, "passes": [[name, text], ...], "log": [str],
           "seconds": float, "pipelines": [[kernel, [[name, text], ...]], ...]}
          ("passes": the last kernel's pipeline; "pipelines": every kernel's, in compile order,
          for a module holding several kernels. XLA compiles identical kernels once.)
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pallaslab.lowering.compiler_worker import serve

# libtpu's start-up chatter about the (absent) TPU host; compiler messages are kept.
NOISE = ("TPU_ACCELERATOR_TYPE", "host bounds", "InitGoogle", "Source Location Trace",
         "libtpu_init_utils", "Logging before", "TPU_WORKER", "metadata", "GCE", "===",
         "WARNING: All log messages before absl::InitializeLog()", "worker hostname",
         "learning/45eac")


def main() -> int:
    dump_dir = Path(os.environ["PALLASLAB_MOSAIC_DUMP"])
    from pallaslab.model import _jax

    devices: dict[str, Any] = {}
    return serve(lambda request: _compile(_jax, devices, request, dump_dir), NOISE)


def _compile(_jax: Any, devices: dict[str, Any], request: dict, dump_dir: Path) -> dict:
    shutil.rmtree(dump_dir, ignore_errors=True)
    dump_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    topology = request["topology"]
    try:
        if topology not in devices:
            devices[topology] = _jax.tpu_topology_devices(topology)
        chips = devices[topology]
        partitions = int(request.get("partitions", 1))
        if partitions > len(chips):
            raise ValueError(f"the topology {topology} has {len(chips)} devices, not "
                             f"{partitions}")
        _jax.aot_compile_stablehlo(request["hlo"], chips[0],
                                   partitions=chips[:partitions] if partitions > 1 else ())
        ok, error = True, None
    except Exception as err:  # the compiler's verdict
        ok, error = False, f"{type(err).__name__}: {err}"
    seconds = time.perf_counter() - start
    pipelines = _read_pipelines(dump_dir) if request.get("dumps", True) else []
    passes = pipelines[-1][1] if pipelines else []
    return {"ok": ok, "error": error, "passes": passes, "pipelines": pipelines,
            "seconds": seconds}


def _read_pipelines(dump_dir: Path) -> list[list[Any]]:
    """Mosaic's module after every pass, per kernel in compile order: `[kernel, [[pass, text],
    ...]]`, from files `<id>-<seq>-mosaic-dump-<kernel>-<pass>`.

    Deserialization runs several times per compile (one file each); a kernel's pass pipeline
    is the group of files that starts with `-original`.
    """
    groups: dict[str, list[Path]] = {}
    for path in dump_dir.glob("*-mosaic-dump-*.txt"):
        groups.setdefault(path.name.split("-", 1)[0], []).append(path)
    pipelines = [g for g in groups.values() if any(p.stem.endswith("-original") for p in g)]
    # the id prefix is a timestamp in nanoseconds: numeric order is compile order
    pipelines.sort(key=lambda g: int(g[0].name.split("-", 1)[0]))
    return [_pipeline(sorted(files, key=lambda p: p.name)) for files in pipelines]


def _pipeline(files: list[Path]) -> list[Any]:
    original = next(p for p in files if p.stem.endswith("-original"))
    kernel = original.stem.split("-mosaic-dump-", 1)[1].removesuffix("-original")
    passes = [[path.stem.split("-mosaic-dump-", 1)[1].removeprefix(kernel + "-"),
               path.read_text(errors="replace")] for path in files]
    return [kernel, passes]


if __name__ == "__main__":
    sys.exit(main())

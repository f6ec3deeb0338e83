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

A pass's module past `PASS_TEXT_LIMIT` characters (the LLO passes of a 1024-square matmul
run to 8 MB, 80,000 lines) comes back as its head and tail with a line that says how much
was left out: whole, every pass of such a kernel made a 67 MB response that the worker and
the notebook both held at once, for text no view shows whole.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pallaslab.lowering.compiler_worker import serve

PASS_TEXT_LIMIT = 1 << 20

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
               shortened(path.read_text(errors="replace"))] for path in files]
    return [kernel, passes]


def shortened(module: str, limit: int = PASS_TEXT_LIMIT) -> str:
    """`module` within about `limit` characters: its first and last operations, a comment
    line naming what was left out, and every `#loc` line (they map the kept lines to Python)."""
    if len(module) <= limit:
        return module
    lines = module.splitlines(keepends=True)
    locations = [line for line in lines if line.startswith("#loc")]
    operations = [line for line in lines if not line.startswith("#loc")]
    head = _within(operations, limit // 2)
    tail = _within(operations[::-1], limit // 2)[::-1]
    left_out = operations[len(head):len(operations) - len(tail)]
    note = (f"// pallaslab: {len(left_out):,} lines ({sum(map(len, left_out)):,} characters) "
            f"of this pass's module left out here; it keeps {limit:,} characters per pass\n")
    return "".join([*head, note, *tail, *locations])


def _within(lines: list[str], budget: int) -> list[str]:
    kept, used = [], 0
    for line in lines:
        used += len(line)
        if used > budget:
            break
        kept.append(line)
    return kept


if __name__ == "__main__":
    sys.exit(main())

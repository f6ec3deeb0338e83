"""Executors (interpret, tpu-interpret, gpu-interpret, vectorized, device, reference), compare,
stepper. Executors are found by name in `pallaslab.execute.registry`; `EXECUTOR_NAMES` is the
registered names, read when asked (an executor registered later is in it).

- the protocol and the executors: `protocol`, `registry`, `builtin`, `prepared` and `data`
  (concrete arguments), `executors` (`run`), `choice` and `auto` (which executor, and the
  magic's cell value), one module per executor (`interpret`, `tpu_interpret`,
  `gpu_interpret`, `vectorized` with `vectorize_layout`, `device`, `reference`), `running`,
  `capabilities` (what each interpreter cannot run), `result`;
- comparing: `comparison` (`compare`), `pair`, `static_checks`, `unwritten`, `diagnostics`,
  `device_mismatches` (a multi-device mismatch traced to its shard and DMA);
- stepping: `stepper` (`step`), `core_stepper`, `device_stepper`, `mesh_stepping`,
  `gated_run`, `step_requests`, `step_worker`;
- running safely: `isolation`, `worker_request` and `_worker` (the killable worker process,
  its requests, time limits),
  `monitor` (the program running, prints, progress, Ctrl-C); `profile` (profiler timelines).

Adding an executor: docs/executors.md.
"""

from typing import Any

import pallaslab.execute.builtin  # noqa: F401 - registers the built-in executors first
from pallaslab.execute.comparing.comparison import Comparison, OutputComparison, compare
from pallaslab.execute.comparing.pair import PairComparison
from pallaslab.execute.prepared import prepare
from pallaslab.execute.protocol import Executor, ExecutorError, ExecutorSpec
from pallaslab.execute.registry import (
    executor_names,
    executor_spec,
    executor_specs,
    get_executor,
    register_executor,
    unregister_executor,
)
from pallaslab.execute.result import OutputInfo, ProgramPrint, RunResult
from pallaslab.execute.runs import run
from pallaslab.execute.stepping.stepper import ProgramBlocks, Stepper, step
from pallaslab.execute.worker.compile_cache import compile_cache_stats as compile_cache_stats

__all__ = [
    "EXECUTOR_NAMES",
    "Comparison",
    "Executor",
    "ExecutorError",
    "ExecutorSpec",
    "OutputComparison",
    "OutputInfo",
    "PairComparison",
    "ProgramBlocks",
    "ProgramPrint",
    "RunResult",
    "Stepper",
    "compare",
    "executor_names",
    "executor_spec",
    "executor_specs",
    "get_executor",
    "prepare",
    "register_executor",
    "run",
    "step",
    "unregister_executor",
]


def __getattr__(name: str) -> Any:
    if name == "EXECUTOR_NAMES":  # live: the names registered now
        return executor_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

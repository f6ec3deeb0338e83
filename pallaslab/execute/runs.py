"""Executors: one protocol, six ways to run a captured function.

- `interpret`: JAX's HLO interpreter (`interpret=True`); not for TPU mesh kernels (it binds
  no mesh axes), which its status says in one line;
- `tpu-interpret`: TPU interpret mode, `pltpu.InterpretParams(detect_races=True,
  on_race="warn", out_of_bounds_reads="raise", uninitialized_memory="nan",
  num_cores_or_threads=2)`: two cores, so programs along "parallel" dimensions really overlap
  and races show; races, out-of-bounds reads and revisited outputs become findings. Also runs
  TPU mesh kernels (`pl.kernel` / `pl.core_map` over tensorcore and SparseCore meshes), one
  simulated core per mesh core;
- `gpu-interpret`: Mosaic GPU interpret mode (`plgpu.InterpretGPUParams()`), for `plgpu.kernel`
  kernels only (it rejects BlockSpec windows);
- `vectorized`: each `pallas_call` as one batched XLA computation on the CPU (programs that
  may run together `vmap`ped, the rest scanned), falling back to the interpreter, with the
  rule that decided, where batching is not provably equivalent (`execute/executors/vectorized.py`);
- `device`: compiled for an attached TPU or GPU; unavailable (with the reason) elsewhere;
- `reference`: the user's pure-JAX function with the same signature.

Whole functions run by re-running their captured jaxpr with every kernel's `interpret`
parameter replaced, so library kernels that hard-code `interpret=False` run interpreted too.
What an interpreter cannot run (see `pallaslab.execute.executors.capabilities`) makes it
*unavailable* with a one-line reason, never a traceback.

This module runs executors (`run`, `execute`); the protocol they follow is
`pallaslab.execute.protocol`, and they are found by name in `pallaslab.execute.registry`
(`docs/executors.md` shows how to add one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pallaslab.execute.comparing.unwritten import unwritten_findings
from pallaslab.execute.data import DEFAULT_SEED
from pallaslab.execute.executors.choice import default_executor_for, fallback_note, run_executor_for
from pallaslab.execute.executors.device import DeviceExecutor, attached_accelerator, require_device
from pallaslab.execute.executors.interpret import InterpretExecutor
from pallaslab.execute.executors.reference import ReferenceExecutor
from pallaslab.execute.prepared import check_devices, output_info, prepare
from pallaslab.execute.protocol import Executor, ExecutorError, ExecutorSpec, Prepared, numpy_values
from pallaslab.execute.registry import executor_names, get_executor
from pallaslab.execute.result import DefaultChoice, RunResult
from pallaslab.execute.worker import isolation
from pallaslab.execute.worker.running import execute_here
from pallaslab.model import Capture, Kernel

__all__ = ["DeviceExecutor", "Executor", "ExecutorError", "ExecutorSpec", "InterpretExecutor",
           "Prepared", "ReferenceExecutor", "attached_accelerator", "check_devices", "execute",
           "execute_here", "executor_names", "get_executor", "output_info", "prepare",
           "require_device", "run", "with_unwritten_findings"]


def execute(executor: Executor, prepared: Prepared, *, timeout: float | None = None
            ) -> RunResult:
    """Run `prepared` with `executor` within `timeout` seconds, never raising for what the
    kernel or the executor does wrong: the result's `status` says ran / unavailable / failed /
    timed-out. Interpreters run in a worker process that is killed at the time limit or on
    Ctrl-C (a compiled XLA loop cannot be stopped inside this process); the result says when
    a run had to stay in-process (then the limit is checked at each program start)."""
    limit = isolation.time_limit(timeout)
    reason = executor.unavailable() or executor.cannot_run(prepared)
    if reason:
        return RunResult(executor.name, None, prepared.output_info, 0.0, 0.0,
                         unavailable=reason, inputs=numpy_values(prepared.flat_args))
    result = isolation.run_isolated(executor, prepared, limit)
    if prepared.devices is not None:  # the worker judged it, on its own capture
        return result
    return with_unwritten_findings(result, prepared)


def with_unwritten_findings(result: RunResult, prepared: Prepared) -> RunResult:
    """The result with an `unwritten-output` finding for each output no program fully wrote."""
    found = unwritten_findings(result, prepared.capture)
    return dataclasses.replace(result, findings=(*result.findings, *found)) if found else result


def run(kernel_or_fn: Kernel | Callable[..., Any], *args: Any,
        executor: str | Executor | None = None, reference: Callable[..., Any] | None = None,
        seed: int = DEFAULT_SEED, timeout: float | None = None, devices: int | None = None,
        captured: Capture | None = None, **kwargs: Any) -> RunResult:
    """Run `fn(*args, **kwargs)` (or a captured `Kernel` on its operands) with one executor;
    None: the executor that can run the kernels (`vectorized` on a CPU host — interpret
    mode's results, batched — unless they need another interpreter, e.g. `tpu-interpret` for
    TPU mesh kernels): the result's `default_choice` says which and why (and its notes, in
    words, when not interpret mode).

    Abstract arguments get seeded random data (see `pallaslab.execute.data`). The result's
    `status` says whether it ran, was unavailable here, failed, or was stopped by the time
    limit (`timeout` seconds; see `pallaslab.execute.worker.isolation`); nothing the kernel does
    wrong raises.

    Args:
        kernel_or_fn: the function that launches the kernels, or one captured `Kernel`.
        *args: its arguments: arrays, or `jax.ShapeDtypeStruct`s (filled with seeded random
            data); for a lone `Kernel`, its operands (none: random ones of its shapes).
        executor: an executor name of `EXECUTOR_NAMES` ("interpret", "tpu-interpret",
            "vectorized", "reference", ...) or an `Executor`; None chooses, as above.
        reference: the pure-JAX function the "reference" executor runs (same signature as `fn`).
        seed: the seed of the random data for abstract arguments.
        timeout: the time limit in seconds (None: $PALLASLAB_TIMEOUT, else 300; `math.inf`:
            none).
        devices: run on this many simulated CPU devices, in a worker process (kernels inside
            `shard_map`).
        captured: `fn(*args, **kwargs)`'s capture, made already on these concrete
            arguments: not traced again here (see `prepare`).
        **kwargs: the function's keyword arguments.

    Returns:
        A frozen `RunResult`: `status`, `outputs`, `findings` (races, out-of-bounds reads,
        unwritten output, deadlocks, ...), `notes` and the executor's name.

    Raises:
        ExecutorError: an unknown executor name, or a bad `devices`.
        TimeoutValueError: `timeout` is not a positive number of seconds.
    """
    chosen = None if executor is None else get_executor(executor, reference=reference)
    isolation.time_limit(timeout)  # a bad limit is an error before anything runs
    prepared = prepare(kernel_or_fn, args, kwargs, seed=seed, devices=devices,
                       captured=captured)
    if chosen is not None:
        return execute(chosen, prepared, timeout=timeout)
    devices = prepared.devices
    name, why = run_executor_for(prepared.capture, devices)
    result = execute(get_executor(name), prepared, timeout=timeout)
    reason, fallback = why, None
    if result.status == "unavailable" and \
            name != (other := default_executor_for(prepared.capture, devices)):
        why = fallback = fallback_note(result.unavailable or "", other)
        result = execute(get_executor(other), prepared, timeout=timeout)
    result = dataclasses.replace(result, default_choice=DefaultChoice(name, reason, fallback))
    if why is None:
        return result
    note = f"executor chosen by default: {result.executor} ({why})"
    return dataclasses.replace(result, notes=(note, *result.notes))

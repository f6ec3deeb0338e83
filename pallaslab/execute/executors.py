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
  rule that decided, where batching is not provably equivalent (`execute/vectorized.py`);
- `device`: compiled for an attached TPU or GPU; unavailable (with the reason) elsewhere;
- `reference`: the user's pure-JAX function with the same signature.

Whole functions run by re-running their captured jaxpr with every kernel's `interpret`
parameter replaced, so library kernels that hard-code `interpret=False` run interpreted too.
What an interpreter cannot run (see `pallaslab.execute.capabilities`) makes it *unavailable*
with a one-line reason, never a traceback.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np

from pallaslab.analysis.findings import Finding
from pallaslab.errors import PallasLabError, UnavailableError
from pallaslab.execute import capabilities, diagnostics
from pallaslab.execute.data import DEFAULT_SEED, concretize, concretize_for_kernels
from pallaslab.execute.monitor import Cancelled, RunMonitor, total_programs
from pallaslab.execute.reference import reference_mismatch
from pallaslab.execute.result import OutputInfo, RunResult
from pallaslab.execute.unwritten import unwritten_findings
from pallaslab.model import Capture, Kernel, _jax, capture


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A function (or lone kernel) captured on concrete arguments, ready to run."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    capture: Capture
    output_info: tuple[OutputInfo, ...]
    # Run on this many simulated CPU devices (a worker process configured for them); None:
    # on this process's devices.
    devices: int | None = None

    @property
    def flat_args(self) -> tuple[Any, ...]:
        return tuple(self.capture.handle.flat_args)


def prepare(kernel_or_fn: Kernel | Callable[..., Any], args: Sequence[Any],
            kwargs: Mapping[str, Any] | None = None, *, seed: int = DEFAULT_SEED,
            chip: str | None = None, devices: int | None = None) -> Prepared:
    """Capture on concrete arguments (abstract ones get seeded random data); `chip`: the
    abstract TPU to trace under when tracing asks the TPU (see `capture`); `devices`: run on
    that many simulated CPU devices (see `check_devices`)."""
    check_devices(devices)
    kwargs = dict(kwargs or {})
    if isinstance(kernel_or_fn, Kernel):
        fn = _lone_kernel_fn(kernel_or_fn)
        args = tuple(concretize(tuple(args), seed=seed)) if args else tuple(
            concretize(tuple(_jax.kernel_call_avals(kernel_or_fn)), seed=seed))
    else:
        fn = kernel_or_fn
        args, kwargs = concretize_for_kernels(fn, tuple(args), kwargs, seed=seed)
    with _jax.debug_checks_enabled():  # kernels keep their pl.debug_checks for executors
        cap = capture(fn, *args, **kwargs) if chip is None else \
            capture(fn, *args, chip=chip, **kwargs)
    return Prepared(fn, tuple(args), kwargs, cap, _output_info(cap), devices)


def check_devices(devices: int | None) -> None:
    """`devices=N`: the function runs in a worker process whose JAX has N CPU devices (set
    before its backend starts: a notebook that already imported JAX keeps its own count), so
    `shard_map` kernels run on N simulated devices under TPU interpret mode. The function is
    captured here too, on this process's devices: build its mesh from `jax.devices()`."""
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int)
                                or devices < 1):
        raise ExecutorError(f"devices must be a positive number of simulated CPU devices, "
                            f"got {devices!r}")


def _lone_kernel_fn(kernel: Kernel) -> Callable[..., Any]:
    call = _jax.kernel_callable(kernel)

    def lone_kernel(*operands: Any) -> list[Any]:
        return call(*operands)

    lone_kernel.__name__ = kernel.name
    return lone_kernel


def _output_info(cap: Capture) -> tuple[OutputInfo, ...]:
    sources = _jax.output_sources(cap.handle.closed_jaxpr, cap.kernels)
    infos = []
    for i, src in enumerate(sources):
        if src is None:
            infos.append(OutputInfo(f"result[{i}]", None, None))
            continue
        k, j = src
        origin = cap[k].outputs[j].origin
        name = origin if len(cap) == 1 else f"{cap[k].name}[{k}].{origin}"
        if any(info.name == name for info in infos):
            name = f"{name}#{i}"
        infos.append(OutputInfo(name, k, origin))
    return tuple(infos)


class Executor(Protocol):
    name: str

    def unavailable(self) -> str | None:
        """Why this executor cannot run on this machine (None: it can)."""

    def cannot_run(self, prepared: Prepared) -> str | None:
        """Why this executor cannot run these kernels (None: it can)."""

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        """Run; `deadline` (time.monotonic()) stops the run at the next program start."""


def execute(executor: Executor, prepared: Prepared, *, timeout: float | None = None
            ) -> RunResult:
    """Run `prepared` with `executor` within `timeout` seconds, never raising for what the
    kernel or the executor does wrong: the result's `status` says ran / unavailable / failed /
    timed-out. Interpreters run in a worker process that is killed at the time limit or on
    Ctrl-C (a compiled XLA loop cannot be stopped inside this process); the result says when
    a run had to stay in-process (then the limit is checked at each program start)."""
    from pallaslab.execute import isolation

    limit = isolation.time_limit(timeout)
    reason = executor.unavailable() or executor.cannot_run(prepared)
    if reason:
        return RunResult(executor.name, None, prepared.output_info, 0.0, 0.0,
                         unavailable=reason, inputs=_numpy(prepared.flat_args))
    result = isolation.run_isolated(executor, prepared, limit)
    if prepared.devices is not None:  # the worker judged it, on its own capture
        return result
    return with_unwritten_findings(result, prepared)


def with_unwritten_findings(result: RunResult, prepared: Prepared) -> RunResult:
    """The result with an `unwritten-output` finding for each output no program fully wrote."""
    found = unwritten_findings(result, list(prepared.capture))
    return dataclasses.replace(result, findings=(*result.findings, *found)) if found else result


def execute_here(executor: Executor, prepared: Prepared, limit: float) -> RunResult:
    """Run in this process; the time limit is checked at every program start, and any error
    of the executor (an unsupported primitive, a tracing error) becomes a failed result."""
    deadline = time.monotonic() + limit if math.isfinite(limit) else None
    try:
        result = executor.execute(prepared, deadline)
    except ExecutorError as err:
        result = _failed(executor.name, prepared, str(err))
    except Exception as err:  # an executor failing must not abort the others
        result = _failed(executor.name, prepared, _error_text(executor, err))
        text = f"{type(err).__name__}: {err}"
        if why := capabilities.unimplemented(executor.name, text, list(prepared.capture)) or \
                capabilities.interpreter_internal_error(executor.name, err):
            result = dataclasses.replace(result, error=None, unavailable=why)
    return result


def _error_text(executor: Executor, err: Exception) -> str:
    text = str(err).strip()
    # XLA wraps errors raised in host callbacks: their informative line is the last one.
    line = diagnostics.short_error(text) if "Traceback" in text or "XlaRuntimeError" in \
        type(err).__name__ else (text.splitlines() or [""])[0]
    who = (f"the reference {getattr(executor.reference, '__name__', 'function')} raised "
           if isinstance(executor, ReferenceExecutor) else "")
    return f"{who}{type(err).__name__}: {line}"


def _failed(name: str, prepared: Prepared, error: str) -> RunResult:
    return RunResult(name, None, prepared.output_info, 0.0, 0.0, error=error,
                     inputs=_numpy(prepared.flat_args))


# --------------------------------------------------------------------------------------------


def _numpy(values: Sequence[Any]) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(v) for v in values)


def _timed_out(name: str, prepared: Prepared, monitor: RunMonitor, seconds: float,
               compile_time: float) -> RunResult:
    return RunResult(name, None, prepared.output_info, seconds, compile_time,
                     prints=monitor.prints, inputs=_numpy(prepared.flat_args),
                     timed_out=f"{name} stopped by its time limit after {seconds:.1f} s, "
                               f"while running {monitor.running()}")


def _timed_jaxpr_run(name: str, prepared: Prepared, jaxpr: Any, monitor: RunMonitor,
                     interpreter_findings: Callable[[], list[Finding]] = list,
                     reset: Callable[[], None] = lambda: None) -> RunResult:
    flat = prepared.flat_args
    t0 = time.perf_counter()
    compiled = jax.jit(_jax.jaxpr_callable(jaxpr)).lower(*flat).compile()
    compile_time = time.perf_counter() - t0
    outputs: tuple[np.ndarray, ...] | None = None
    error = None
    findings: list[Finding] = []
    t1 = time.perf_counter()
    with monitor.watching():
        try:
            outs = compiled(*flat)
            jax.block_until_ready(outs)
            jax.effects_barrier()
            outputs = _numpy(outs)
        except Exception as err:  # the interpreters report kernel bugs as runtime errors
            reset()
            if monitor.timed_out:
                return _timed_out(name, prepared, monitor, time.perf_counter() - t1,
                                  compile_time)
            if monitor.cancelled or isinstance(err.__cause__, Cancelled) or \
                    "Cancelled: interrupted" in str(err):
                raise KeyboardInterrupt(
                    f"{name} run interrupted after {monitor.programs_run} program(s)") from None
            if why := capabilities.unimplemented(name, str(err), list(prepared.capture)) or \
                    capabilities.interpreter_internal_error(name, err):
                return RunResult(name, None, prepared.output_info, 0.0, compile_time,
                                 unavailable=why, inputs=_numpy(flat))
            error = diagnostics.short_error(str(err))
            findings.append(diagnostics.error_finding(str(err), list(prepared.capture), monitor))
    wall = time.perf_counter() - t1
    if monitor.cancelled:
        raise KeyboardInterrupt(f"{name} run interrupted after {monitor.programs_run} program(s)")
    findings = interpreter_findings() + list(diagnostics.debug_check_findings(monitor)) + \
        findings
    return RunResult(name, outputs, prepared.output_info, wall, compile_time,
                     prints=monitor.prints, findings=tuple(findings), error=error,
                     inputs=_numpy(flat))


class InterpretExecutor:
    """JAX's HLO interpreter (`interpret=True`): fast, no TPU memory model."""

    name = "interpret"

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return capabilities.hlo_interpreter_refusal(prepared.capture)

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        cap = prepared.capture
        monitor = RunMonitor(list(cap), desc=self.name, total=total_programs(list(cap)),
                             deadline=deadline)
        by_eqn = {id(k.handle.eqn): k for k in cap}

        def overrides(eqn: Any) -> dict[str, Any]:
            update: dict[str, Any] = {"interpret": True}
            kernel = by_eqn.get(id(eqn))
            if kernel is not None:
                index = kernel.index
                update |= _jax.instrument_kernel(
                    eqn, on_entry=lambda: monitor.enter_next(index),
                    on_check=monitor.check_failed) or {}
            return update

        jaxpr = _jax.rewrite_kernels(cap.handle.closed_jaxpr, overrides)
        return _timed_jaxpr_run(self.name, prepared, jaxpr, monitor)


def attached_accelerator() -> tuple[Any | None, str | None]:
    """(device, None) for an attached TPU or GPU, else (None, why not)."""
    for platform in ("tpu", "gpu"):
        try:
            devices = jax.devices(platform)
        except RuntimeError:
            continue
        if devices:
            return devices[0], None
    try:
        backends = sorted({d.platform for d in jax.devices()})
    except RuntimeError:  # pragma: no cover
        backends = []
    return None, ("no TPU or GPU is attached: the JAX backends here are "
                  f"{', '.join(backends) or 'none'}; run on a TPU/GPU VM for hardware outputs")


class DeviceExecutor:
    """The kernels compiled and run on an attached TPU or GPU."""

    name = "device"

    def __init__(self, device: Any = None):
        self._device = device

    def device(self) -> Any:
        if self._device is not None:
            return self._device
        return attached_accelerator()[0]

    def unavailable(self) -> str | None:
        if self._device is not None:
            return None
        return attached_accelerator()[1]

    def cannot_run(self, prepared: Prepared) -> str | None:
        return None

    isolated = False  # an accelerator belongs to one process: the notebook's

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        device = self.device()
        cap = prepared.capture
        jaxpr = _jax.rewrite_kernels(
            cap.handle.closed_jaxpr,
            lambda eqn: {"interpret": False} if _jax.is_pallas_call(eqn) else None)
        flat = jax.device_put(prepared.flat_args, device)
        t0 = time.perf_counter()
        compiled = jax.jit(_jax.jaxpr_callable(jaxpr)).lower(*flat).compile()
        compile_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        outs = jax.block_until_ready(compiled(*flat))
        return RunResult(self.name, _numpy(outs), prepared.output_info,
                         time.perf_counter() - t1, compile_time, inputs=_numpy(prepared.flat_args))


class ReferenceExecutor:
    """The user's pure-JAX function, called with the same arguments."""

    name = "reference"

    def __init__(self, reference: Callable[..., Any] | None):
        self.reference = reference

    def unavailable(self) -> str | None:
        if self.reference is None:
            return "no reference function was given (pass reference=fn or --reference FILE:FUNC)"
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return None

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        assert self.reference is not None
        t0 = time.perf_counter()
        compiled = jax.jit(self.reference).lower(*prepared.args, **prepared.kwargs).compile()
        compile_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        outs = jax.block_until_ready(compiled(*prepared.args, **prepared.kwargs))
        wall = time.perf_counter() - t1
        leaves = _numpy(jax.tree.leaves(outs))
        mismatch = reference_mismatch(getattr(self.reference, "__name__", "function"), leaves,
                                      prepared)
        if mismatch:
            raise ExecutorError(mismatch)
        return RunResult(self.name, leaves, prepared.output_info, wall, compile_time,
                         inputs=_numpy(prepared.flat_args))


def _tpu_interpret() -> Executor:
    from pallaslab.execute.tpu_interpret import TpuInterpretExecutor

    return TpuInterpretExecutor()


def _gpu_interpret() -> Executor:
    from pallaslab.execute.gpu_interpret import GpuInterpretExecutor

    return GpuInterpretExecutor()


def _vectorized() -> Executor:
    from pallaslab.execute.vectorized import VectorizedExecutor

    return VectorizedExecutor()


class ExecutorError(PallasLabError, ValueError):
    """An executor name or reference that does not fit."""


EXECUTOR_NAMES = ("interpret", "tpu-interpret", "gpu-interpret", "vectorized", "device",
                  "reference")


def get_executor(name: str | Executor, *, reference: Callable[..., Any] | None = None
                 ) -> Executor:
    if not isinstance(name, str):
        return name
    factories: dict[str, Callable[[], Executor]] = {
        "interpret": InterpretExecutor,
        "tpu-interpret": _tpu_interpret,
        "gpu-interpret": _gpu_interpret,
        "vectorized": _vectorized,
        "device": DeviceExecutor,
        "reference": lambda: ReferenceExecutor(reference),
    }
    if name not in factories:
        raise ExecutorError(f"unknown executor {name!r}; the executors are: "
                            f"{', '.join(EXECUTOR_NAMES)}")
    return factories[name]()


def run(kernel_or_fn: Kernel | Callable[..., Any], *args: Any,
        executor: str | Executor | None = None, reference: Callable[..., Any] | None = None,
        seed: int = DEFAULT_SEED, timeout: float | None = None, devices: int | None = None,
        **kwargs: Any) -> RunResult:
    """Run `fn(*args, **kwargs)` (or a captured `Kernel` on its operands) with one executor;
    None: the executor that can run the kernels (`vectorized` on a CPU host — interpret
    mode's results, batched — unless they need another interpreter, e.g. `tpu-interpret` for
    TPU mesh kernels), the result's notes saying why when not interpret mode.

    Abstract arguments get seeded random data (see `pallaslab.execute.data`). The result's
    `status` says whether it ran, was unavailable here, failed, or was stopped by the time
    limit (`timeout` seconds; see `pallaslab.execute.isolation`); nothing the kernel does
    wrong raises.
    """
    from pallaslab.execute.auto import default_executor_for, fallback_note, run_executor_for
    from pallaslab.execute.isolation import time_limit

    chosen = None if executor is None else get_executor(executor, reference=reference)
    time_limit(timeout)  # a bad limit is an error before anything runs
    prepared = prepare(kernel_or_fn, args, kwargs, seed=seed, devices=devices)
    if chosen is not None:
        return execute(chosen, prepared, timeout=timeout)
    devices = prepared.devices
    name, why = run_executor_for(prepared.capture, devices)
    result = execute(get_executor(name), prepared, timeout=timeout)
    if result.status == "unavailable" and \
            name != (other := default_executor_for(prepared.capture, devices)):
        why = fallback_note(result.unavailable or "", other)
        result = execute(get_executor(other), prepared, timeout=timeout)
    if why is None:
        return result
    note = f"executor chosen by default: {result.executor} ({why})"
    return dataclasses.replace(result, notes=(note, *result.notes))


def require_device() -> Any:
    device, reason = attached_accelerator()
    if device is None:
        raise UnavailableError(f"the device executor is unavailable: {reason}")
    return device

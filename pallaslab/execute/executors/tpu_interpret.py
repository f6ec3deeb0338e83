"""The `tpu-interpret` executor: JAX's TPU interpret mode (HBM/VMEM/SMEM, DMAs, semaphores,
race detection), with deadlock detection and, on several devices, the record of every DMA and
semaphore operation between them."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax

from pallaslab.analysis.findings import Finding
from pallaslab.execute.executors import capabilities, diagnostics, semaphore_refusals
from pallaslab.execute.protocol import ExecutorSpec, Prepared
from pallaslab.execute.result import RunResult
from pallaslab.execute.worker.monitor import RunMonitor, total_programs
from pallaslab.execute.worker.running import CallbackErrors, MonitorSlot, timed_jaxpr_run
from pallaslab.model import Kernel, _jax
from pallaslab.model._jax import deadlock, ref_views
from pallaslab.model.source_names import short_source

TPU_INTERPRET_CORES = 2


def tpu_interpret_refusal(kernels: Sequence[Kernel]) -> str | None:
    """Why TPU interpret mode cannot run these kernels (None: it can)."""
    return semaphore_refusals.tpu_interpreter_semaphore_refusal(kernels) or \
        _zero_size_refusal(kernels) or _bounded_slice_refusal(kernels) or \
        capabilities.tpu_interpreter_refusal(kernels)


class TpuInterpretExecutor:
    """TPU interpret mode: HBM/VMEM/SMEM, DMAs, semaphores, race detection (slow)."""

    spec = ExecutorSpec(
        name="tpu-interpret", label="TPU interpret mode",
        description="TPU interpret mode: HBM/VMEM/SMEM, DMAs, semaphores, races, "
                    "out-of-bounds reads and deadlocks found (slow)",
        integer_fill="max", interpreter=capabilities.TPU_INTERPRETER, mode="tpu",
        second_rank=0,
        refusal=tpu_interpret_refusal)
    name = spec.name

    def __init__(self, cores: int = TPU_INTERPRET_CORES, detect_races: bool = True):
        self.cores = cores
        self.detect_races = detect_races

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return self.spec.refusal(prepared.capture)

    def params(self, recorder: Callable[..., Any] | None = None,
               logging_mode: Any = None) -> Any:
        return _jax.tpu_interpret_params(
            detect_races=self.detect_races, on_race="warn", out_of_bounds_reads="raise",
            uninitialized_memory="nan", num_cores_or_threads=self.cores,
            grid_point_recorder=recorder, logging_mode=logging_mode)

    def device_recorder(self, kernels: Sequence[Kernel]) -> Any:
        """The recorder that turns the interpreter's log of DMAs and semaphores into the run's
        record: on several devices, and for kernels that issue DMAs or semaphore operations
        themselves (what the Pipeline view cannot know statically: how often, in what
        order); None otherwise."""
        several = jax.device_count() > 1 and any(k.device_mesh or k.communicates
                                                  for k in kernels)
        manual = any(k.dmas or k.semaphore_ops for k in kernels)
        return _jax.DeviceRecorder(jax.device_count()) if several or manual else None

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        from jax.experimental.pallas import tpu as pltpu

        cap = prepared.capture
        kernels = list(cap)
        monitor = RunMonitor(kernels, desc=self.name, total=total_programs(kernels),
                             deadline=deadline)
        by_eqn = {id(k.handle.eqn): k for k in cap}

        devices = self.device_recorder(kernels)
        mode = _jax.device_logging_mode() if devices is not None else None

        def rewrite(slot: MonitorSlot) -> Any:
            def recorder_for(index: int) -> Callable[..., Any]:
                def record(token: Any, grid_point: Any, core_id: Any) -> Any:
                    slot.enter(index, tuple(int(g) for g in grid_point), int(core_id))
                    return token
                return record

            def overrides(eqn: Any) -> dict[str, Any]:
                kernel = by_eqn.get(id(eqn))
                recorder = recorder_for(kernel.index) if kernel is not None else None
                update = {"interpret": self.params(recorder, mode)}
                # Loads and stores through a reshaped or bitcast ref, via their region.
                if regions := ref_views.region_overrides(eqn):
                    update |= regions
                    eqn = eqn.replace(params={**eqn.params, **regions})
                if kernel is not None:
                    update |= _jax.full_dimension_semantics_params(kernel) or {}
                    update |= _jax.instrument_kernel(eqn, on_check=slot.check_failed) or {}
                return update

            return _jax.rewrite_kernels(cap.handle.closed_jaxpr, overrides)

        # A run that records DMAs and semaphores logs through a mode made for it: not kept
        # (a function in the options has no structural key).
        options = (self.cores, self.detect_races) if devices is None else _recorded_run
        race_log = diagnostics.RaceLog(monitor)
        # Cores stopped by a failure may still fail in callbacks after the run returns: JAX's
        # tracebacks of those stay out of stderr too (the run's error says it in one line).
        with CallbackErrors():
            with race_log, _jax.DeadlockWatch() as watch, devices or contextlib.nullcontext():
                result = timed_jaxpr_run(
                    self, prepared, rewrite, monitor, options,
                    interpreter_findings=lambda: list(diagnostics.race_findings(race_log,
                                                                                kernels)),
                    reset=pltpu.reset_tpu_interpret_mode_state)
            if devices is not None:
                result = _with_device_record(result, devices, kernels)
                if race_log.races and result.device_record is not None:  # copies' cores named
                    result = _with_copy_cores(result, race_log, kernels)
            if watch.found is not None:
                # Devices stopped after the run returned leave their failure in the runtime's
                # effect tokens and the interpreter's state: consume it, so the next run is
                # clean.
                with contextlib.suppress(Exception):
                    jax.effects_barrier()
                pltpu.reset_tpu_interpret_mode_state()
        result = _with_deadlock(result, watch.found, kernels)
        notes = ref_views.tpu_notes(k.handle.eqn for k in kernels if k.handle is not None)
        return dataclasses.replace(result, notes=(*result.notes, *notes)) if notes else result


def _recorded_run() -> None:
    """The options of a run that records its DMAs and semaphores: never a cache key."""


def _zero_size_refusal(kernels: Sequence[Kernel]) -> str | None:
    """TPU interpret mode indexes every operand buffer from 0 and fails on an empty one
    ("Out of bound slice: start=0, dim=0"): a limit of JAX's interpreter, not a verdict."""
    for k in kernels:
        for op in (*k.inputs, *k.outputs):
            if op.shape and 0 in tuple(op.shape):
                return (f"TPU interpret mode cannot run kernel {k.name}: {op.origin} has the "
                        f"zero-size shape {tuple(op.shape)}, which JAX's interpreter fails to "
                        "index (ValueError: Out of bound slice: start=0, dim=0); a limit of "
                        "the interpreter, not a verdict on the kernel")
    return None


def _bounded_slice_refusal(kernels: Sequence[Kernel]) -> str | None:
    """TPU interpret mode fails inside its own code on a `pl.BoundedSlice` window (its
    block copies expect one start per dimension); `interpret` runs such windows at their own
    size (`model/_jax/bounded_slices.py`)."""
    for k in kernels:
        for op in (*k.inputs, *k.outputs):
            if any(d.kind == "bounded" for d in op.block_dims or ()):
                return (f"TPU interpret mode cannot run kernel {k.name}: {op.origin} has a "
                        "pl.BoundedSlice window, which JAX's interpreter fails to copy; a "
                        "limit of the interpreter, not a verdict on the kernel")
    return None


def _with_device_record(result: RunResult, devices: Any, kernels: Sequence[Kernel]
                        ) -> RunResult:
    """The run with the record of its DMAs and semaphores (a record that cannot be read is
    said in a note; the run itself stands)."""
    try:
        names = {key: origin for k in kernels
                 for key, origin in (diagnostics.mesh_buffers(k) if k.kind == "mesh" else
                                     _jax.tpu_interpret_buffers(k)).items()}
        record = devices.record(_jax.remote_destinations(kernels, jax.device_count()), names)
    except Exception as err:
        return dataclasses.replace(result, notes=(
            *result.notes, f"the record of the run's DMAs and semaphores could not be read: "
                           f"{type(err).__name__}: {err}"))
    return dataclasses.replace(result, device_record=record)


def _with_copy_cores(result: RunResult, race_log: diagnostics.RaceLog,
                     kernels: Sequence[Kernel]) -> RunResult:
    """The race findings again, naming the cores whose async copies race (from the record)."""
    transfers = result.device_record.transfers if result.device_record else ()
    races = tuple(diagnostics.race_findings(race_log, list(kernels), transfers))
    kept = tuple(f for f in result.findings if f.code != "data-race")
    return dataclasses.replace(result, findings=(*races, *kept))


def _with_deadlock(result: RunResult, found: Any, kernels: Sequence[Kernel]) -> RunResult:
    """A run stopped by the deadlock watch: its error is the deadlock, as a finding naming
    the blocked devices and the kernel's semaphore waits (the finding's code says
    "deadlock"; the run's error says it in words)."""
    if found is None:
        return result
    # The blocked waits name their own lines when the log gives them; else the kernel's waits
    waits = sorted({op.source for k in kernels for op in k.semaphore_ops
                    if op.kind in ("wait", "dma_wait") and op.source})
    located = all(w.source for w in found.waits)
    where = f" (the kernel waits at {', '.join(short_source(w) for w in waits)})" \
        if waits and not located else ""
    kernel = kernels[0] if len(kernels) == 1 else None  # ids are per launch: one kernel's
    names = deadlock.semaphore_names(kernel.operands) if kernel is not None else {}
    several = kernel is None or kernel.kind != "pallas_call" or \
        "parallel" in (kernel.dimension_semantics or ())
    message = found.describe(names, several_cores=several) + where
    kept = tuple(f for f in result.findings if "DeadlockError" not in f.message)
    return dataclasses.replace(result, error=f"deadlock: {message}",
                               findings=(Finding("deadlock", "error", message), *kept))

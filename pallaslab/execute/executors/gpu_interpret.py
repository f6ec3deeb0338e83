"""The `gpu-interpret` executor: Mosaic GPU interpret mode, for `plgpu.kernel` kernels."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from pallaslab.analysis.findings import Finding
from pallaslab.execute.executors import capabilities, diagnostics
from pallaslab.execute.protocol import ExecutorSpec, Prepared, numpy_values
from pallaslab.execute.result import RunResult
from pallaslab.execute.worker.monitor import RunMonitor
from pallaslab.execute.worker.running import CallbackErrors
from pallaslab.model import Kernel, _jax
from pallaslab.model.devices import DeviceRecord


def gpu_interpret_refusal(kernels: Sequence[Kernel]) -> str | None:
    """Why Mosaic GPU interpret mode cannot run these kernels (None: it can)."""
    for k in kernels:
        if k.kind != "mesh" or k.backend != "mosaic_gpu":
            return (f"kernel {k.name} is a {k.kind} kernel for {k.backend or 'no backend'}: "
                    "GPU interpret mode runs plgpu.kernel (Mosaic GPU mesh) kernels only")
    return None


class GpuInterpretExecutor:
    """Mosaic GPU interpret mode, for `plgpu.kernel` kernels."""

    spec = ExecutorSpec(
        name="gpu-interpret", label="GPU interpret mode",
        description="Mosaic GPU interpret mode, for plgpu.kernel kernels (warpgroup races "
                    "found)",
        interpreter="JAX's Mosaic GPU interpreter", refusal=gpu_interpret_refusal,
        mode="gpu")
    name = spec.name

    def unavailable(self) -> str | None:
        try:
            from jax.experimental.pallas import mosaic_gpu  # noqa: F401
        except ImportError as err:  # pragma: no cover - absl-py missing
            return f"Mosaic GPU interpret mode cannot be imported ({err}); " \
                   'install it with: pip install "pallaslab[gpu]"'
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return self.spec.refusal(prepared.capture)

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        from jax.experimental.pallas import mosaic_gpu as plgpu

        # Rebinding the captured equation misses the interpreter's ordered effects: re-trace
        # the user's function with GPU interpret mode forced instead.
        kernels = list(prepared.capture)
        monitor = RunMonitor(kernels, desc=self.name, deadline=deadline)
        # The barrier log says when TMA copies landed and who waited: kept for kernels that
        # copy or synchronise (the Pipeline view's recorded run).
        recorder = _jax.BarrierRecorder() if any(k.dmas or k.semaphore_ops for k in kernels) \
            else None
        # Races between a block's warpgroups are found by vector clocks (whatever the threads'
        # order), reported as warnings: the run goes on and each race is a finding.
        logging = {"logging_mode": _jax.barrier_logging_mode()} if recorder is not None else {}
        params = _jax.gpu_interpret_params(detect_races=True, on_race="warn", **logging)
        t0 = time.perf_counter()
        with plgpu.force_gpu_interpret_mode(params), _jax.gpu_interpreter_rules():
            compiled = jax.jit(prepared.fn).lower(*prepared.args, **prepared.kwargs).compile()
        compile_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        outputs: tuple[np.ndarray, ...] | None = None
        error, unavailable, findings = None, None, []
        races = diagnostics.GpuRaceLog()
        with monitor.watching(), recorder or contextlib.nullcontext(), races, CallbackErrors():
            try:
                outs = compiled(*prepared.args, **prepared.kwargs)
                jax.block_until_ready(outs)
                jax.effects_barrier()
                outputs = numpy_values(jax.tree.leaves(outs))
            except Exception as err:
                # JAX's interpreter lacking a feature is no verdict on the kernel.
                unavailable = capabilities.unimplemented(
                    self.spec.interpreter, f"{type(err).__name__}: {err}", list(prepared.capture))
                if unavailable is None:
                    error = diagnostics.short_error(str(err))
                    findings.append(Finding("interpret-error", "error", error))
        raced, left_out = diagnostics.gpu_race_findings(races.messages, kernels)
        findings += raced
        return RunResult(self.name, outputs, prepared.output_info, time.perf_counter() - t1,
                         compile_time, prints=monitor.prints, findings=tuple(findings),
                         error=error, unavailable=unavailable,
                         notes=_notes(kernels, left_out),
                         inputs=numpy_values(prepared.flat_args),
                         device_record=None if recorder is None else _barrier_record(
                             recorder, kernels))


def _notes(kernels: Sequence[Kernel], left_out: bool) -> tuple[str, ...]:
    """What this run models beyond JAX's interpreter, and what it leaves out."""
    notes = (diagnostics.GPU_SAME_WARPGROUP_NOTE,) if left_out else ()
    return notes + _jax.gpu_rule_notes(kernels)


def _barrier_record(recorder: Any, kernels: Sequence[Kernel]) -> DeviceRecord:
    """The run's barrier phases and waits, its TMA copies by their lines; "devices" are the
    blocks of the grid (warpgroups of a block share its number)."""
    copies = {d.source: d for k in kernels for d in k.dmas if d.kind == "tma" and d.source}
    blocks = max((_blocks(k) for k in kernels), default=1)
    return recorder.record(copies, blocks)


def _blocks(kernel: Kernel) -> int:
    mesh = kernel.mesh
    if mesh is None:
        return 1
    warpgroups = mesh.warpgroups[0] if mesh.warpgroups else None
    return math.prod(size for name, size in mesh.axes if name != warpgroups)

"""The `interpret` executor: JAX's HLO interpreter (`interpret=True`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from pallaslab.execute.executors import capabilities, semaphore_refusals
from pallaslab.execute.protocol import ExecutorSpec, Prepared
from pallaslab.execute.result import RunResult
from pallaslab.execute.worker.monitor import RunMonitor, total_programs
from pallaslab.execute.worker.running import MonitorSlot, timed_jaxpr_run
from pallaslab.model import _jax
from pallaslab.model._jax import bounded_slices, cross_call_semaphores, hlo_bodies


class InterpretExecutor:
    """JAX's HLO interpreter (`interpret=True`): fast, no TPU memory model."""

    spec = ExecutorSpec(
        name="interpret", label="interpret mode",
        description="JAX's HLO interpreter (interpret=True): fast, no TPU memory model",
        integer_fill="min", interpreter="JAX's HLO interpreter (interpret=True)",
        mode="hlo", second_rank=1,
        refusal=semaphore_refusals.with_hlo_semaphore_refusal(
            lambda kernels: capabilities.hlo_interpreter_refusal(kernels)
            or capabilities.hlo_interpreter_gap(kernels)))
    name = spec.name

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return self.spec.refusal(prepared.capture)

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        cap = prepared.capture
        monitor = RunMonitor(list(cap), desc=self.name, total=total_programs(list(cap)),
                             deadline=deadline)
        by_eqn = {id(k.handle.eqn): k for k in cap}

        def rewrite(slot: MonitorSlot) -> Any:
            def overrides(eqn: Any) -> dict[str, Any]:
                update: dict[str, Any] = {"interpret": True}
                kernel = by_eqn.get(id(eqn))
                rewritten = hlo_bodies.rewritten_body(eqn)
                update |= rewritten
                eqn = eqn.replace(params={**eqn.params, **rewritten})
                if kernel is not None:
                    index = kernel.index
                    update |= _jax.instrument_kernel(
                        eqn, on_entry=lambda: slot.enter_next(index),
                        on_check=slot.check_failed) or {}
                return update

            # Semaphores passed between pallas_calls in program order, then pl.BoundedSlice
            # windows at their own size, grid step by grid step.
            return bounded_slices.with_windows(cross_call_semaphores.with_semaphores_in_order(
                _jax.rewrite_kernels(cap.handle.closed_jaxpr, overrides)))

        result = timed_jaxpr_run(self, prepared, rewrite, monitor)
        eqns = [k.handle.eqn for k in cap if k.handle is not None]
        return dataclasses.replace(result, notes=(
            *result.notes, *bounded_slices.run_notes(eqns), *cross_call_semaphores.run_notes(eqns),
            *hlo_bodies.run_notes(eqns)))

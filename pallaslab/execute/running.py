"""Helpers every executor shares: running one in this process without raising, and the
timed run of a rewritten jaxpr under a run monitor (the interpreters')."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import jax

from pallaslab.analysis.findings import Finding
from pallaslab.execute import capabilities, diagnostics
from pallaslab.execute.monitor import Cancelled, RunMonitor
from pallaslab.execute.prepared import Prepared
from pallaslab.execute.protocol import Executor, ExecutorError, numpy_values
from pallaslab.execute.registry import spec_for
from pallaslab.execute.result import RunResult
from pallaslab.model import _jax


def execute_here(executor: Executor, prepared: Prepared, limit: float) -> RunResult:
    """Run in this process; the time limit is checked at every program start, and any error
    of the executor (an unsupported primitive, a tracing error) becomes a failed result."""
    deadline = time.monotonic() + limit if math.isfinite(limit) else None
    try:
        result = executor.execute(prepared, deadline)
    except ExecutorError as err:
        result = failed_result(executor.name, prepared, str(err))
    except Exception as err:  # an executor failing must not abort the others
        result = failed_result(executor.name, prepared, error_text(err))
        mode = spec_for(executor).interpreter
        text = f"{type(err).__name__}: {err}"
        if why := capabilities.unimplemented(mode, text, list(prepared.capture)) or \
                capabilities.interpreter_internal_error(mode, err):
            result = dataclasses.replace(result, error=None, unavailable=why)
    return result


def error_text(err: BaseException) -> str:
    """An executor's error in one line: its type and its informative line."""
    text = str(err).strip()
    # XLA wraps errors raised in host callbacks: their informative line is the last one.
    line = diagnostics.short_error(text) if "Traceback" in text or "XlaRuntimeError" in \
        type(err).__name__ else (text.splitlines() or [""])[0]
    return f"{type(err).__name__}: {line}"


def failed_result(name: str, prepared: Prepared, error: str) -> RunResult:
    return RunResult(name, None, prepared.output_info, 0.0, 0.0, error=error,
                     inputs=numpy_values(prepared.flat_args))


def _timed_out(name: str, prepared: Prepared, monitor: RunMonitor, seconds: float,
               compile_time: float) -> RunResult:
    return RunResult(name, None, prepared.output_info, seconds, compile_time,
                     prints=monitor.prints, inputs=numpy_values(prepared.flat_args),
                     timed_out=f"{name} stopped by its time limit after {seconds:.1f} s, "
                               f"while running {monitor.running()}")


def timed_jaxpr_run(executor: Executor, prepared: Prepared, jaxpr: Any, monitor: RunMonitor,
                    interpreter_findings: Callable[[], list[Finding]] = list,
                    reset: Callable[[], None] = lambda: None) -> RunResult:
    """Compile and run `jaxpr` (the capture with its kernels rewritten for an interpreter)
    on the prepared arguments, watched by `monitor`; the interpreter's errors become
    findings, its missing features make the executor unavailable."""
    name, mode = executor.name, spec_for(executor).interpreter
    flat = prepared.flat_args
    t0 = time.perf_counter()
    compiled = jax.jit(_jax.jaxpr_callable(jaxpr)).lower(*flat).compile()
    compile_time = time.perf_counter() - t0
    outputs = None
    error = None
    findings: list[Finding] = []
    t1 = time.perf_counter()
    with monitor.watching():
        try:
            outs = compiled(*flat)
            jax.block_until_ready(outs)
            jax.effects_barrier()
            outputs = numpy_values(outs)
        except Exception as err:  # the interpreters report kernel bugs as runtime errors
            reset()
            if monitor.timed_out:
                return _timed_out(name, prepared, monitor, time.perf_counter() - t1,
                                  compile_time)
            if monitor.cancelled or isinstance(err.__cause__, Cancelled) or \
                    "Cancelled: interrupted" in str(err):
                raise KeyboardInterrupt(
                    f"{name} run interrupted after {monitor.programs_run} program(s)") from None
            if why := capabilities.unimplemented(mode, str(err), list(prepared.capture)) or \
                    capabilities.interpreter_internal_error(mode, err):
                return RunResult(name, None, prepared.output_info, 0.0, compile_time,
                                 unavailable=why, inputs=numpy_values(flat))
            error = diagnostics.short_error(str(err))
            findings.append(diagnostics.error_finding(str(err), list(prepared.capture), monitor))
    wall = time.perf_counter() - t1
    if monitor.cancelled:
        raise KeyboardInterrupt(f"{name} run interrupted after {monitor.programs_run} program(s)")
    findings = interpreter_findings() + list(diagnostics.debug_check_findings(monitor)) + \
        findings
    return RunResult(name, outputs, prepared.output_info, wall, compile_time,
                     prints=monitor.prints, findings=tuple(findings), error=error,
                     inputs=numpy_values(flat))

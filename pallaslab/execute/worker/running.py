"""Helpers every executor shares: running one in this process without raising, the timed run
of a rewritten jaxpr under a run monitor (the interpreters'), and the cache of compiled
computations.

Compiled computations are kept (in whichever process runs the executor: the worker, or the
caller's) under a *structural key* of what they compute: the executor and its options, the
captured jaxpr (equations, params, constants' bytes), the input avals and the JAX options that
change a computation. A run of the same function on arguments of the same shapes then skips
the compile (0.1-0.5 s for a 1024^3 matmul); any change to the kernel body, a block shape or a
closed-over constant is another key. The cache is a bounded LRU (`COMPILED_CACHE_SIZE`
entries); `compile_cache_stats()` reads its hits and misses."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Self

import jax

from pallaslab.analysis.findings import Finding
from pallaslab.errors import untested_jax_failure
from pallaslab.execute.executors import capabilities, diagnostics
from pallaslab.execute.protocol import Executor, ExecutorError, Prepared, numpy_values
from pallaslab.execute.registry import spec_for
from pallaslab.execute.result import RunResult
from pallaslab.execute.worker.monitor import Cancelled, RunMonitor
from pallaslab.model import _jax
from pallaslab.model._jax.compiled import CacheStats, CompiledCache, Unkeyable, structural_key

COMPILED_CACHE_SIZE = 16  # compiled computations kept per process (least recently used dropped)
# JAX options that change what a traced computation compiles to (the worker mirrors them).
_KEYED_CONFIG = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_rank_promotion",
                 "jax_numpy_dtype_promotion", "jax_default_prng_impl",
                 "jax_threefry_partitionable", "jax_platforms")
_COMPILED: CompiledCache[Any] = CompiledCache(maxsize=COMPILED_CACHE_SIZE)
# XLA's options for every executor's compile: a rounding the program asks for is kept.
EXACT_PRECISION: dict[str, Any] = {"xla_allow_excess_precision": False}


def compile_cache_stats() -> CacheStats:
    """Hits and misses of this process's cache of executors' compiled computations."""
    return _COMPILED.stats()


def clear_compile_cache() -> None:
    _COMPILED.clear()


def computation_key(executor: str, options: Any, closed_jaxpr: Any, flat_args: Sequence[Any]
                    ) -> Hashable:
    """What an executor's compiled computation is: raises `Unkeyable` when the jaxpr holds
    something without value equality (then it is compiled for every run)."""
    avals = tuple((tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", type(a).__name__)),
                   bool(getattr(getattr(a, "aval", None), "weak_type", False)))
                  for a in flat_args)
    config = tuple((name, str(getattr(jax.config, name, None))) for name in _KEYED_CONFIG)
    # The abstract mesh a run happens under (the worker re-enters the caller's) lowers too.
    mesh = str(jax.sharding.get_abstract_mesh())
    return (executor, structural_key(options), structural_key(closed_jaxpr), avals, config,
            jax.device_count(), mesh)


def cached_compile(key: Callable[[], Hashable], make: Callable[[], Any]) -> tuple[Any, float]:
    """(the compiled computation under `key()`, seconds spent compiling: 0 on a hit)."""
    spent = 0.0

    def timed_make() -> Any:
        nonlocal spent
        t0 = time.perf_counter()
        made = make()
        spent = time.perf_counter() - t0
        return made

    def safe_key() -> Hashable:
        try:
            return key()
        except Unkeyable:
            raise
        except Exception as err:  # our key failing is never the run's failure: uncached
            raise Unkeyable(f"the key could not be made: {type(err).__name__}: {err}") from err

    return _COMPILED.get(safe_key, timed_make), spent


def compile_exact(lowered: Any) -> tuple[Any, str | None]:
    """(`lowered` compiled with `EXACT_PRECISION`, None), or, where XLA refuses the options,
    (compiled with its defaults, a note saying that explicit roundings may be dropped)."""
    try:
        return lowered.compile(compiler_options=EXACT_PRECISION), None
    except Exception as err:
        compiled = lowered.compile()  # the kernel's own compile error is raised here
        line = (str(err).strip().splitlines() or [""])[0][:200]
        return compiled, (f"compiled with XLA's excess precision allowed ({type(err).__name__}: "
                          f"{line}): a rounding the kernel asks for (x.astype(jnp.bfloat16)"
                          ".astype(jnp.float32)) may be dropped, so floats may differ from the "
                          "interpreter's beyond their last bits")


class MonitorSlot:
    """The run monitor that a cached computation's host callbacks report to. The compiled
    computation outlives the run that compiled it, so its callbacks reach each run's
    monitor through this slot; one run at a time uses it (`bound`)."""

    def __init__(self) -> None:
        self.monitor: RunMonitor | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def bound(self, monitor: RunMonitor) -> Iterator[None]:
        with self._lock:
            self.monitor = monitor
            try:
                yield
            finally:
                self.monitor = None

    def enter_next(self, kernel: int) -> None:
        if self.monitor is not None:
            self.monitor.enter_next(kernel)

    def enter(self, kernel: int, program: tuple[int, ...], core: int) -> None:
        if self.monitor is not None:
            self.monitor.enter(kernel, program, core)

    def check_failed(self, message: str) -> None:
        if self.monitor is not None:
            self.monitor.check_failed(message)


class CallbackErrors(logging.Handler):
    """While active (a context manager), JAX's log of failed host callbacks is kept here
    instead of reaching stderr: JAX logs a traceback for every `io_callback` / `pure_callback`
    that raises (`logger.exception("jax.io_callback failed")`, about 14 lines each), and an
    interpreter reports a kernel's fault (an out-of-bounds read, a race) from such callbacks,
    so without this a run in this process (the unwritten-output re-run, a run that cannot
    travel to the worker) prints them above the verdict. The run's own error says the same
    in one line; `errors` keeps each failure's last line, for a note when the run went on.

    Several may be active at once (threads): the logger stops propagating while any is."""

    MAX_KEPT = 8
    _lock = threading.Lock()
    _active = 0
    _propagate = True

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[str] = []
        self.count = 0

    @staticmethod
    def logger() -> logging.Logger:
        """The logger JAX's host callbacks report failures to (their module's)."""
        from jax.experimental import io_callback

        return logging.getLogger(io_callback.__module__)

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if len(self.errors) < self.MAX_KEPT:
            err = record.exc_info[1] if record.exc_info else None
            line = f"{type(err).__name__}: {err}" if err is not None else record.getMessage()
            self.errors.append((line.strip().splitlines() or [""])[0][:300])

    def note(self) -> str | None:
        """One line on the failures seen, None when there were none."""
        if not self.count:
            return None
        more = f" (and {self.count - len(self.errors)} more)" if self.count > len(self.errors) \
            else ""
        return (f"{self.count} host callback(s) of JAX's interpreter raised: "
                f"{'; '.join(dict.fromkeys(self.errors))}{more}")

    def __enter__(self) -> Self:
        logger = self.logger()
        with CallbackErrors._lock:
            if CallbackErrors._active == 0:
                CallbackErrors._propagate = logger.propagate
                logger.propagate = False
            CallbackErrors._active += 1
            logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = self.logger()
        with CallbackErrors._lock:
            logger.removeHandler(self)
            CallbackErrors._active -= 1
            if CallbackErrors._active == 0:
                logger.propagate = CallbackErrors._propagate


def execute_here(executor: Executor, prepared: Prepared, limit: float) -> RunResult:
    """Run in this process; the time limit is checked at every program start, and any error
    of the executor (an unsupported primitive, a tracing error) becomes a failed result."""
    deadline = time.monotonic() + limit if math.isfinite(limit) else None
    try:
        result = executor.execute(prepared, deadline)
    except ExecutorError as err:
        result = failed_result(executor.name, prepared, str(err))
    except Exception as err:  # an executor failing must not abort the others
        # on a JAX pallaslab is not tested with, its own failure says which JAX
        result = failed_result(executor.name, prepared,
                               untested_jax_failure(err) or error_text(err))
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


def timed_jaxpr_run(executor: Executor, prepared: Prepared, rewrite: Callable[[MonitorSlot], Any],
                    monitor: RunMonitor, options: Any = (),
                    interpreter_findings: Callable[[], list[Finding]] = list,
                    reset: Callable[[], None] = lambda: None) -> RunResult:
    """Compile (or find compiled, keyed by the capture, `options` and the avals) and run
    `rewrite(slot)` (the capture with its kernels rewritten for an interpreter, its callbacks
    reporting to `slot`) on the prepared arguments, watched by `monitor`; the interpreter's
    errors become findings, its missing features make the executor unavailable."""
    name, mode = executor.name, spec_for(executor).interpreter
    flat = prepared.flat_args

    def make() -> tuple[Any, MonitorSlot, str | None]:
        slot = MonitorSlot()
        compiled, note = compile_exact(jax.jit(_jax.jaxpr_callable(rewrite(slot))).lower(*flat))
        return compiled, slot, note

    (compiled, slot, precision), compile_time = cached_compile(
        lambda: computation_key(name, options, prepared.capture.handle.closed_jaxpr, flat), make)
    outputs = None
    error = None
    findings: list[Finding] = []
    t1 = time.perf_counter()
    with slot.bound(monitor), monitor.watching(), CallbackErrors() as callbacks:
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
                     inputs=numpy_values(flat),
                     notes=tuple(n for n in (precision, None if error else callbacks.note()) if n))

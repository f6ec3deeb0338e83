"""Compute what a captured function returns, the way this machine can.

`evaluate(cap)` runs the captured computation itself (the jaxpr `capture` traced), so the
user's Python does not run again:

- kernels that already run here (`interpret=True`, `pltpu.InterpretParams(...)`), or any
  kernel when a TPU or GPU is attached: the jaxpr is evaluated as written, equation by
  equation, exactly as the plain call would run (kernels compile for the attached device);
- kernels written for a TPU or GPU (no `interpret=`) on a host with no accelerator: the jaxpr
  runs with every kernel interpreted (the `interpret` executor; `tpu-interpret` for TPU mesh
  kernels, `gpu-interpret` for Mosaic GPU ones), within the run's time limit, and `note` says
  so in one line.

Under `%%pallas --compare`, `compared_evaluation` takes the value from the comparison's run of
the executor `evaluate` would use (`value_executor`), so the kernels do not run twice.

Nothing raises: `Evaluation.error` holds what the run raised (or an `InterpretedRunError`
saying why the interpreted run failed or was stopped), for the caller to raise when it is
ready.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax

from pallaslab.errors import PallasLabError
from pallaslab.execute.data import any_abstract
from pallaslab.execute.executors.choice import (
    default_executor_for,
    fallback_note,
    run_executor_for,
)
from pallaslab.execute.executors.device import attached_accelerator
from pallaslab.execute.prepared import output_info
from pallaslab.execute.protocol import Prepared
from pallaslab.execute.registry import executor_of_mode, executor_spec, find_spec, get_executor
from pallaslab.execute.result import ProgramPrint, RunResult
from pallaslab.execute.runs import execute
from pallaslab.execute.worker import isolation
from pallaslab.execute.worker.running import execute_here
from pallaslab.model import Capture, Kernel, _jax
from pallaslab.model._jax.compiled import cached_jaxpr_callable


class InterpretedRunError(PallasLabError, RuntimeError):
    """Kernels run under an interpreter automatically (no accelerator here) failed."""


class InterpretedRunTimeout(InterpretedRunError, TimeoutError):
    """Kernels run under an interpreter automatically were stopped by the time limit."""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The captured function's flat outputs (`capture.handle.closed_jaxpr`'s), or the error."""

    outputs: tuple[Any, ...] | None
    error: BaseException | None = None
    executor: str | None = None  # the interpreter that ran the kernels; None: as written
    interpreted: tuple[str, ...] = ()  # kernels that would not run here as written
    note: str | None = None  # one line for the user when the kernels were interpreted
    # what the interpreted run printed (`pl.debug_print`, `jax.debug.print`), in run order:
    # a plain `interpret=True` cell prints them
    prints: tuple[ProgramPrint, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


def runs_here_as_written(kernel: Kernel) -> bool:
    """Does the kernel run on this host as written (interpreted, or an accelerator here)?"""
    return bool(_interpret_param(kernel))


def needing_interpretation(cap: Capture) -> tuple[Kernel, ...]:
    """The kernels that cannot run here as written: compiled-mode kernels (no `interpret=`)
    when no TPU or GPU is attached. Empty when an accelerator is attached."""
    pending = tuple(k for k in cap if not runs_here_as_written(k))
    if not pending or attached_accelerator()[0] is not None:
        return ()
    return pending


def evaluate(cap: Capture, *, timeout: float | None = None,
             call: tuple[Callable[..., Any], Sequence[Any], dict[str, Any]] | None = None
             ) -> Evaluation:
    """Run the captured computation once on its captured (concrete) arguments.

    `call`: `(fn, args, kwargs)` whose capture is `cap` again (flat outputs included, e.g.
    `capture.TracedLeaves(user_fn)`). Kernels that must be interpreted then run in the killable
    worker process (which traces `fn` again, there), so the time limit stops even a program
    spinning inside a compiled loop; without it, or when it cannot be sent there, they run in
    this process, where the limit is checked at program starts only (the note says so)."""
    handle = cap.handle
    pending = needing_interpretation(cap)
    if not pending:
        try:
            # kernels compiled for an identical earlier capture are reused (a re-run)
            outputs = tuple(cached_jaxpr_callable(handle.closed_jaxpr)(*handle.flat_args))
        except Exception as err:  # the user's computation failing, as the plain call would
            return Evaluation(None, err)
        return Evaluation(outputs)
    return _interpreted(cap, pending, timeout, call)


def stopped_in(comparison: Any) -> Evaluation | None:
    """When a comparison's `interpret` run of the same call was stopped by the time limit,
    computing the value would not end either (in this process nothing can stop a program
    spinning inside a compiled loop): the evaluation is that stop. Else None."""
    result = None
    for name in getattr(comparison, "executors", ()) if comparison is not None else ():
        if (spec := find_spec(name)) is not None and spec.mode == "hlo":  # interpret mode's
            result = comparison.result(name)
    if result is None or result.status != "timed-out":
        return None
    why = result.timed_out
    return Evaluation(None, InterpretedRunTimeout(f"the value was not computed: under "
                                                  f"--compare, {why}"), result.executor,
                      note=f"pallaslab: the value was not computed: under --compare, {why}")


def run_on_devices(comparison: Any) -> Evaluation | None:
    """When a comparison ran the kernels on simulated devices this process does not have
    (`--devices N`), the value is that run's: computing it here would use another device
    count. Else None."""
    on_devices = executor_of_mode("tpu")  # the one that runs kernels on several devices
    if comparison is not None and on_devices in getattr(comparison, "executors", ()):
        return devices_evaluation(comparison.result(on_devices))
    return None


def devices_evaluation(result: RunResult) -> Evaluation | None:
    """The value of a run on simulated devices this process does not have; None for a run on
    this process's own devices (or one that kept no record of them)."""
    record = getattr(result, "device_record", None)
    if record is None or record.num_devices == jax.device_count():
        return None
    note = (f"pallaslab: the value is the {result.executor} run's on {record.num_devices} "
            "simulated devices (--devices)")
    if result.status != "ran":
        why = result.reason or result.status
        return Evaluation(None, InterpretedRunError(f"the run on {record.num_devices} devices "
                                                    f"did not finish: {why}"),
                          result.executor, note=f"{note}, which did not finish: {why}")
    return Evaluation(tuple(jax.device_put(o) for o in result.outputs or ()), None,
                      result.executor, note=note)


def compared_evaluation(cap: Capture, comparison: Any, devices: int | None = None
                        ) -> Evaluation | None:
    """The value from the comparison's run (`%%pallas --compare`), so the kernels run once:
    the outputs and prints of the compared executor `evaluate` would run them under
    (`value_executor`). None, for `evaluate` to compute it, when the comparison did not run
    that executor to the end, ran on simulated devices (`devices`) or on seeded data (an
    abstract argument), or its outputs are not the capture's."""
    name = value_executor(cap)
    if comparison is None or name is None or name not in getattr(comparison, "executors", ()):
        return None
    if devices not in (None, jax.device_count()) or any_abstract(tuple(cap.handle.flat_args)):
        return None
    result = comparison.result(name)
    if result.status != "ran" or not _outputs_of(cap, result.outputs or ()):
        return None
    outputs = tuple(jax.device_put(o) for o in result.outputs or ())
    if not (pending := needing_interpretation(cap)):  # as written: no note, as a plain run
        return Evaluation(outputs, prints=tuple(result.prints))
    under = _under(name, run_executor_for(cap)[1], result)
    note = (f"{_HEAD}: ran {_count(pending)} under {under}; the value is the --compare "
            "run's")
    return Evaluation(outputs, None, name, tuple(k.name for k in pending), note,
                      tuple(result.prints))


def value_executor(cap: Capture) -> str | None:
    """The executor whose run gives `evaluate`'s value: for kernels that must be interpreted
    here, the one `_interpreted` runs first (`run_executor_for`); for kernels written with
    `interpret=True` on a host with no accelerator, the interpreter of interpret mode (the
    registry's plain "hlo" one). None otherwise: kernels compiled for an attached device, or
    written with other interpreter parameters, run as no executor runs them."""
    if needing_interpretation(cap):
        return run_executor_for(cap)[0]
    if attached_accelerator()[0] is None and all(_interpret_param(k) is True for k in cap):
        return executor_of_mode("hlo")
    return None


def _interpret_param(kernel: Kernel) -> Any:
    params = getattr(getattr(kernel.handle, "eqn", None), "params", None) or {}
    return params.get("interpret")


def _outputs_of(cap: Capture, outputs: Sequence[Any]) -> bool:
    """Whether `outputs` are the captured function's flat outputs (shapes and dtypes)."""
    avals = cap.handle.closed_jaxpr.out_avals
    return len(outputs) == len(avals) and all(
        tuple(getattr(o, "shape", ())) == tuple(a.shape) and getattr(o, "dtype", None) == a.dtype
        for o, a in zip(outputs, avals, strict=True))


_HEAD = "pallaslab: no TPU/GPU attached"


def _count(kernels: Sequence[Kernel]) -> str:
    return f"{len(kernels)} kernel{'s' if len(kernels) != 1 else ''}"


def _under(name: str, why_not_interpret: str | None, result: RunResult) -> str:
    """The mode the kernels ran under, as the note says it (and why not the HLO interpreter,
    when it was not chosen)."""
    mode = executor_spec(name).label
    under = f"{mode} ({why_not_interpret})" if why_not_interpret else mode
    if _shares_interpret_label(result):  # e.g. vectorized, not handed to an interpreter
        under += f" ({result.executor})"
    return under


def _interpreted(cap: Capture, pending: tuple[Kernel, ...], timeout: float | None,
                 call: tuple[Callable[..., Any], Sequence[Any], dict[str, Any]] | None = None
                 ) -> Evaluation:
    name, why_not_interpret = run_executor_for(cap)
    handle = cap.handle
    fn = _jax.jaxpr_callable(handle.closed_jaxpr)
    fn.__name__ = cap.function_name
    here = Prepared(fn, tuple(handle.flat_args), {}, cap, output_info(cap))
    limit = isolation.time_limit(timeout)

    def run(executor: str) -> RunResult:
        if call is None:  # the captured jaxpr cannot travel: run here
            return execute_here(get_executor(executor), here, limit)
        sent = Prepared(call[0], tuple(call[1]), dict(call[2]), cap, here.output_info)
        result = execute(get_executor(executor), sent, timeout=limit)
        if not result.worker_refused:
            return result
        # the worker could not rebuild or trace the call as this process did: run here
        why = (result.error or "").splitlines()[0][:200]
        result = execute_here(get_executor(executor), here, limit)
        note = f"ran in the notebook's process ({why}): the time limit is checked between " \
               "programs only"
        return dataclasses.replace(result, notes=(*result.notes, note), in_process=note)

    kernels = _count(pending)
    head = _HEAD
    names = tuple(k.name for k in pending)
    result = run(name)
    if result.status == "unavailable" and name != (other := default_executor_for(cap)):
        fallback = fallback_note(result.unavailable or "", other)
        name = other
        result = run(name)
        why_not_interpret = fallback
    mode = executor_spec(name).label
    under = _under(name, why_not_interpret, result)
    stayed = f"; {result.in_process}" if result.in_process else ""
    prints = tuple(result.prints)
    if result.status == "ran":
        assert result.outputs is not None
        outputs = tuple(jax.device_put(o) for o in result.outputs)
        return Evaluation(outputs, None, name, names, f"{head}: ran {kernels} under {under}"
                          f"{stayed}", prints)
    if result.status == "timed-out":
        why = f"{result.timed_out}"
        if f"{limit:g} s" not in why:
            why += f" (the time limit is {limit:g} s)"
        note = f"{head}: {kernels} under {under} did not finish: {why}{stayed}"
        return Evaluation(None, InterpretedRunTimeout(f"{mode} run stopped: {why}"), name,
                          names, note, prints)
    why = result.reason or "no outputs"
    note = f"{head}: ran {kernels} under {under}, and it failed: {why}{stayed}"
    return Evaluation(None, InterpretedRunError(f"{mode} run failed: {why}"), name, names,
                      note, prints)


def _shares_interpret_label(result: RunResult) -> bool:
    """Whether the run's own executor (not the HLO interpreter, and not one it handed the run
    to) goes by interpret mode's label, so the note must name it."""
    spec = executor_spec(result.executor)
    return (result.ran_under is None and spec.mode is not None
            and result.executor != executor_of_mode(spec.mode)
            and spec.label == executor_spec(executor_of_mode(spec.mode)).label)

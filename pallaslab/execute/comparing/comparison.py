"""Side-by-side comparison of executors, with every mismatch traced to the grid programs
that wrote it.

Default tolerances (`allclose` is `|a - b| <= atol + rtol * |b|`; NaN equals nothing, not even
NaN, unless `equal_nan=True`: an unwritten output is NaN under the interpreters, and two
unwritten outputs must not agree), by the dtype of the compared output:

    float64 rtol 1e-12 | float32 1e-5 | float16 1e-3 | bfloat16 1.6e-2 | float8 1.25e-1
    integers and bool: exact (0)

and, unless given, `atol = rtol * max|b|`: rounding error scales with the magnitude of the
values summed, so near-zero entries of a large output are judged on the output's scale.
Override either with `compare(..., rtol=..., atol=...)` (or `--rtol/--atol` on the CLI).

ULP distance counts representable floats between the two values (integers: |a - b|); max
rel is taken over the elements with |b| > atol only (see `pallaslab.execute.comparing.pair`).

Honest verdicts (`outcome`): each executor's status (ran / unavailable / failed / timed-out) is
kept and only executors that ran are compared.

- "mismatch": a pair of executors that ran disagrees;
- "errors": the kernel was found wrong without a mismatch: a run reported an error finding
  about the kernel (a deadlock, an out-of-bounds read, a race, unwritten output, ...), even
  one that stopped the run, or the static analysis found an error `pallaslab check` reports
  (`pallaslab.execute.comparing.static_checks`, e.g. `block-out-of-bounds`,
  `parallel-write-conflict`):
  compare never passes a kernel check fails;
- "incomplete": fewer than two executors ran, or an executor the caller named (or the
  reference, whenever `reference=` is given) did not run for a reason that is not the
  kernel's (unavailable here, the executor failed, the reference raised or returned other
  dtypes, the time limit): the comparison asked for was not made;
- "pass": complete, all close and nothing found.

Warnings that do not fail the comparison (`warnings`): an error far beyond the rounding of a
16-bit output dtype (`pallaslab.execute.comparing.pair.rounding_note`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from pallaslab.analysis.findings import Finding
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.analysis.tiling import OperandTiling, Tiling
from pallaslab.execute.causes import Cause, Provenance, find_causes
from pallaslab.execute.causes.wrapped import (
    Trace,
    Untraced,
    trace_json,
    trace_outputs,
    traced_pairs,
    untraced_line,
)
from pallaslab.execute.comparing import compare_args
from pallaslab.execute.comparing.device_mismatches import device_mismatches
from pallaslab.execute.comparing.pair import (
    PairComparison,
    compare_arrays,
    default_rtol,
    ulp_distance,
)
from pallaslab.execute.comparing.precision import compute_rtol
from pallaslab.execute.comparing.static_checks import (
    StaticFinding,
    unreported_errors,
    why_the_runs_agree,
)
from pallaslab.execute.comparing.unwritten import unwritten_confirmed
from pallaslab.execute.data import DEFAULT_SEED
from pallaslab.execute.executors.choice import default_executors
from pallaslab.execute.prepared import prepare
from pallaslab.execute.protocol import Executor, Prepared
from pallaslab.execute.registry import ExecutorList, reference_executor
from pallaslab.execute.result import OutputInfo, RunResult, RunStatus
from pallaslab.execute.runs import execute
from pallaslab.execute.stepping.mesh_stepping import core_mismatches
from pallaslab.execute.worker.isolation import time_limit
from pallaslab.model import Capture, Kernel

__all__ = ["Comparison", "OutputComparison", "PairComparison", "compare", "compare_arrays",
           "default_rtol", "ulp_distance"]

# Error findings that stop a run without saying the kernel is wrong (an interpreter's own
# failure, or the user's interrupt): every other error finding is about the kernel.
NOT_THE_KERNELS = ("interpret-error", "interrupted")

@dataclasses.dataclass(frozen=True)
class OutputComparison:
    origin: str  # the kernel output's origin ("outputs[0]"), or "result[i]"
    kernel: int | None
    shape: tuple[int, ...]
    dtype: np.dtype
    block_shape: tuple[int, ...] | None  # block extent, for drawing block boundaries
    pairs: tuple[PairComparison, ...]
    # Why it mismatches (`pallaslab.execute.causes`): found only on a mismatch
    causes: tuple[Cause, ...] = ()
    provenance: Provenance | None = None  # per element: the last writing program and line
    # A mismatched output a wrapper made from a kernel output (`causes.wrapped`): the kernel
    # output its elements came from, or why they cannot be traced back to one.
    traced: Trace | None = dataclasses.field(default=None, repr=False)

    def untraced_line(self) -> str | None:
        """Why a mismatched output names no programs, where a wrapper mixed its elements."""
        return untraced_line(self.traced) if isinstance(self.traced, Untraced) else None

    def to_json(self) -> dict[str, Any]:
        causes = [c.to_json() for c in self.causes]
        return {"origin": self.origin, "kernel": self.kernel, "shape": list(self.shape),
                "dtype": str(self.dtype),
                "block_shape": list(self.block_shape) if self.block_shape else None,
                "causes": causes, "traced": trace_json(self.traced),
                "pairs": [{**p.to_json(), "causes": [] if p.allclose else causes}
                          for p in self.pairs]}


@dataclasses.dataclass(frozen=True)
class ExecutorStatus:
    status: RunStatus  # "ran", "unavailable", "failed" or "timed-out"
    reason: str | None  # why it did not run (None when it ran)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class Comparison:
    executors: tuple[str, ...]
    results: tuple[RunResult, ...]
    outputs: tuple[OutputComparison, ...]
    kernels: tuple[Kernel, ...] = dataclasses.field(default=(), repr=False)
    notes: tuple[str, ...] = ()  # e.g. which executors were chosen by default, and why
    # Executors that must run for the comparison to be complete: those the caller named, and
    # the reference whenever one was given. () (a comparison made by hand): two that ran.
    required: tuple[str, ...] = ()
    # The kernels' static error findings an interpreted run cannot show (`static_checks`).
    static_findings: tuple[StaticFinding, ...] = ()

    @property
    def statuses(self) -> dict[str, ExecutorStatus]:
        return {r.executor: ExecutorStatus(r.status, r.reason) for r in self.results}

    @property
    def ran(self) -> tuple[str, ...]:
        return tuple(r.executor for r in self.results if r.status == "ran")

    @property
    def missing(self) -> tuple[RunResult, ...]:
        """Runs that make the comparison incomplete: required executors that did not run and
        did not find the kernel's error either (else every run, when fewer than two ran)."""
        if len(self.ran) < 2:
            return tuple(r for r in self.results if r.status != "ran")
        return tuple(r for r in self.results if r.executor in self.required
                     and r.status != "ran" and not _kernel_errors(r.findings))

    @property
    def complete(self) -> bool:
        """At least two executors ran, and every required one ran (or found the kernel's
        error): the comparison asked for was made."""
        return len(self.ran) >= 2 and not self.missing

    @property
    def allclose(self) -> bool:
        """Complete, and every pair of executors that ran agrees on every output."""
        return self.complete and not self._mismatch

    @property
    def _mismatch(self) -> bool:
        return any(not p.allclose for o in self.outputs for p in o.pairs)

    @property
    def findings(self) -> tuple[Finding, ...]:
        """What the runs found, then the static analysis's error findings (see
        `static_findings`)."""
        return (*(f for r in self.results for f in r.findings),
                *(s.finding for s in self.static_findings))

    @property
    def kernel_errors(self) -> tuple[Finding, ...]:
        """Error findings that say the kernel is wrong (not an interpreter's own failure)."""
        return _kernel_errors(self.findings)

    @property
    def passed(self) -> bool:
        """All close, and no run (nor the static analysis) reported an error."""
        return self.allclose and not any(f.severity == "error" for f in self.findings)

    @property
    def outcome(self) -> str:
        """"mismatch", "errors" (the kernel's, found without a mismatch), "incomplete" or
        "pass" (see the module's docstring)."""
        if self._mismatch:
            return "mismatch"
        if self.kernel_errors:
            return "errors"
        if not self.complete:
            return "incomplete"
        return "pass" if self.passed else "errors"

    @property
    def warnings(self) -> tuple[str, ...]:
        """What looks wrong without failing the comparison (an error far beyond rounding)."""
        return tuple(f"{o.origin}: {p.a} vs {p.b}: {p.rounding_note}" for o in self.outputs
                     for p in o.pairs if p.rounding_note)

    def verdict(self) -> str:
        """One line: pass, mismatch, errors found, or why the comparison is incomplete."""
        kind = self.outcome
        if kind == "pass":
            return "all close"
        if kind == "incomplete":
            return f"INCOMPLETE: {self._incomplete()}"
        if kind == "mismatch":
            return "MISMATCH" if self.complete else f"MISMATCH; and {self._incomplete()}"
        found = self._errors_found()
        if self.complete:
            return f"all close, but {found}"
        return f"KERNEL ERROR: {found}; {self._incomplete()}"

    def _errors_found(self) -> str:
        """"the runs found errors: a, b; static analysis found errors: c"."""
        ran = sorted({f.code for r in self.results for f in r.findings if f.severity == "error"})
        static = sorted({s.finding.code for s in self.static_findings})
        parts = ([f"the runs found errors: {', '.join(ran)}"] if ran else []) + (
            [f"static analysis found errors: {', '.join(static)}"] if static else [])
        return "; ".join(parts)

    def _incomplete(self) -> str:
        """Which executors did not run and why, and what that left uncompared."""
        why = "; ".join(_why_not_run(r) for r in self.missing)
        if len(self.ran) < 2:
            return (f"only {len(self.ran)} of {len(self.results)} executor(s) ran, nothing "
                    f"was compared with two: {why}")
        names = [r.executor for r in self.missing]
        against = "its reference" if names == [reference_executor()] else (
            "them" if len(names) > 1 else "it")
        agree = " and ".join(self.ran) if len(self.ran) == 2 else ", ".join(self.ran)
        return (f"{', '.join(names)} did not run, so the kernel was not checked against "
                f"{against}: {why}; only {agree} were compared")

    def result(self, executor: str) -> RunResult:
        for r in self.results:
            if r.executor == executor:
                return r
        raise KeyError(f"no executor {executor!r}; compared: {', '.join(self.executors)}")

    def cause_lines(self) -> tuple[str, ...]:
        """One line per cause of a mismatch: "outputs[0]: index-map: ...", and one per
        mismatched output whose elements cannot be traced back to a kernel's programs."""
        lines = []
        for o in self.outputs:
            lines += [f"{o.origin}: {c.kind}: {c.message}" for c in o.causes]
            if (untraced := o.untraced_line()) is not None:
                lines.append(f"{o.origin}: {untraced}")
        return tuple(lines)

    def mismatched_programs(self) -> tuple[tuple[int, ...], ...]:
        """Every program that wrote a mismatched block (any output, any pair)."""
        seen: dict[tuple[int, ...], None] = {}
        for o in self.outputs:
            for p in o.pairs:
                seen.update(dict.fromkeys(p.programs))
        return tuple(seen)

    def to_json(self) -> dict[str, Any]:
        """The contract of `pallaslab compare --json` (docs/architecture.md, "Stable
        contracts"), plus run details."""
        return {
            "executors": list(self.executors),
            "executors_status": {k: v.to_json() for k, v in self.statuses.items()},
            "complete": self.complete, "allclose": self.allclose, "passed": self.passed,
            "outcome": self.outcome, "verdict": self.verdict(), "notes": list(self.notes),
            "warnings": list(self.warnings), "required": list(self.required),
            "static_findings": [s.to_json() for s in self.static_findings],
            "outputs": [o.to_json() for o in self.outputs],
            "runs": [{"executor": r.executor, "ok": r.ok, "status": r.status,
                      "wall_time": r.wall_time, "compile_time": r.compile_time,
                      "error": r.error, "unavailable": r.unavailable,
                      "timed_out": r.timed_out, "notes": list(r.notes),
                      "findings": [f.to_json() for f in r.findings]} for r in self.results],
        }


def _why_not_run(r: RunResult) -> str:
    """"name: status (reason)"; a run the kernel's error stopped names the error only (its
    finding says the rest)."""
    if r.status == "failed" and (codes := sorted({f.code for f in _kernel_errors(r.findings)})):
        return f"{r.executor}: stopped by the kernel's {', '.join(codes)}"
    return f"{r.executor}: {r.status} ({r.reason})"


def _kernel_errors(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    return tuple(f for f in findings if f.severity == "error" and f.code not in NOT_THE_KERNELS)


def compare(fn: Callable[..., Any] | Kernel, *args: Any,
            executors: ExecutorList | Sequence[str | Executor] | str | None = None,
            reference: Callable[..., Any] | None = None, rtol: float | None = None,
            atol: float | None = None, seed: int = DEFAULT_SEED, timeout: float | None = None,
            equal_nan: bool = False, devices: int | None = None,
            captured: Capture | None = None, **kwargs: Any) -> Comparison:
    """Run `fn(*args, **kwargs)` under each executor and compare every pair that ran.

    `executors` is a sequence of names (or one comma-separated string, "interpret,reference").
    None chooses (see `default_executors`): an interpreter that can run the kernels against
    the reference, or against TPU interpret mode; the comparison's notes say which.
    `reference=` is always compared with: when `executors` lacks "reference", it is added
    (and a note says so). Each run has a time limit of `timeout` seconds (see
    `pallaslab.execute.worker.isolation`). An executor that cannot run here (e.g. `device` without a
    TPU/GPU), fails or runs out of time is reported in `statuses`; the comparison is then
    incomplete (`complete` False), never a pass, unless its failure was the kernel's error
    (a deadlock, an out-of-bounds read: `outcome` "errors").
    `devices=N` runs every executor (the reference too) on N simulated CPU devices, in a worker
    process (see `pallaslab.execute.runs.check_devices`).

    Args:
        fn: the function that launches the kernels, or one captured `Kernel`.
        *args: its arguments: arrays, or `jax.ShapeDtypeStruct`s (filled with seeded random
            data, the same for every executor).
        executors: executor names or `Executor`s, at least two once the reference is added;
            None chooses.
        reference: a pure-JAX function with `fn`'s signature whose outputs are the expected ones.
        rtol: the relative tolerance (None: by dtype, see the module's table).
        atol: the absolute tolerance (None: `rtol * max|b|`).
        seed: the seed of the random data for abstract arguments.
        timeout: each run's time limit in seconds (None: $PALLASLAB_TIMEOUT, else 300).
        equal_nan: count NaN equal to NaN.
        devices: run on this many simulated CPU devices, in a worker process.
        captured: `fn(*args, **kwargs)`'s capture, made already on these concrete
            arguments: not traced again here (see `prepare`).
        **kwargs: the function's keyword arguments.

    Returns:
        A frozen `Comparison`: per output and pair of executors the errors, the mismatched
        blocks and the programs that wrote them, the executors' statuses, `complete` and
        `allclose`; `to_json()` is the `pallaslab compare --json` object.

    Raises:
        ExecutorError: an unknown executor, fewer than two executors, a negative or
            non-finite `rtol` or `atol`, or a bad `devices`.
        TimeoutValueError: `timeout` is not a positive number of seconds.
    """
    compare_args.check_tolerance("rtol", rtol)
    compare_args.check_tolerance("atol", atol)
    notes: tuple[str, ...] = ()
    named = None
    if executors is not None:
        named, added = compare_args.named(executors, reference)
        notes = (added,) if added else ()
    runners = None if named is None else compare_args.runners(named, reference)
    time_limit(timeout)  # a bad limit is an error before anything runs
    prepared = prepare(fn, args, kwargs, seed=seed, devices=devices, captured=captured)
    if runners is None:
        names, note = default_executors(prepared.capture, reference, prepared.devices)
        runners, notes = compare_args.runners(ExecutorList(names), reference), (note,)
    results = tuple(unwritten_confirmed(execute(r, prepared, timeout=timeout), prepared.capture)
                    for r in runners)
    compared = compare_results(prepared, results, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if compared._mismatch and not devices_note(prepared):  # a pass pays nothing for causes
        compared = with_causes(compared, prepared, reference)
    required = tuple(r.name for r in runners) if named is not None else (
        (reference_executor(),) if reference is not None else ())
    if on_devices := devices_note(prepared):
        notes = (*notes, on_devices)
    # How the reference ran (under jax.jit when it traces, else as written), said once here.
    notes = (*notes, *compared.notes,
             *(n for r in results if r.executor == reference_executor() for n in r.notes),
             *device_mismatches(compared), *core_mismatches(compared),
             *why_the_runs_agree(compared.static_findings))
    return dataclasses.replace(compared, notes=notes, required=required)


def with_causes(compared: Comparison, prepared: Prepared,
                reference: Callable[..., Any] | None) -> Comparison:
    """The comparison with each mismatched output's causes and provenance."""
    found = find_causes(prepared, [o.pairs for o in compared.outputs], reference,
                        [o.traced for o in compared.outputs])
    outputs = tuple(o if f is None else dataclasses.replace(
        o, causes=f.causes, provenance=f.provenance)
        for o, f in zip(compared.outputs, found, strict=True))
    return dataclasses.replace(compared, outputs=outputs)


def devices_note(prepared: Prepared) -> str | None:
    """What `devices=N` means for the comparison, when this process has another count."""
    here = jax.device_count()
    if prepared.devices is None or prepared.devices == here:
        return None
    return (f"ran on {prepared.devices} simulated CPU devices in a worker process; the "
            f"kernels shown were captured here on {here} device(s), so mismatches are not "
            "attributed to programs")


def compare_results(prepared: Prepared, results: Sequence[RunResult], *,
                    rtol: float | None = None, atol: float | None = None,
                    equal_nan: bool = False) -> Comparison:
    # One inspection per kernel, as `pallaslab check` makes it: its tiling attributes the
    # mismatches, its errors are the static findings. Kernels captured here on another device
    # count than the run's may tile differently: then mismatches are not attributed to
    # programs (`devices_note` says so).
    inspections = list(inspect_capture(prepared.capture))
    tilings: dict[int, Tiling | None] = {} if devices_note(prepared) else \
        {i.kernel.index: i.tiling for i in inspections}
    usable = [r for r in results if r.status == "ran"]
    outputs, notes = [], []
    for i, info in enumerate(prepared.output_info):
        ot = _output_tiling(info, tilings)
        writers = _writers(prepared, info) if ot is not None and len(usable) >= 2 else None
        shape, dtype = _shape_dtype(usable, i, prepared)
        # The precision the kernel computes in (`comparing.precision`), unless given.
        own_rtol, note = compute_rtol(prepared.capture[info.kernel] if info.kernel is not None
                                      and rtol is None else None, dtype, info.name, atol)
        notes += [note] if note else []
        pairs = tuple(_pair(a, b, i, ot, tilings.get(info.kernel) if info.kernel is not None
                            else None, own_rtol if rtol is None else rtol, atol, equal_nan,
                            writers)
                      for a, b in itertools.combinations(usable, 2))
        outputs.append(OutputComparison(
            origin=info.name, kernel=info.kernel, shape=shape, dtype=dtype,
            block_shape=tuple(ot.extent) if ot is not None else None, pairs=pairs))
    outputs = through_wrappers(prepared, outputs, tilings)
    return Comparison(tuple(r.executor for r in results), tuple(results), tuple(outputs),
                      tuple(prepared.capture), notes=tuple(notes),
                      static_findings=unreported_errors(inspections, results))


def through_wrappers(prepared: Prepared, outputs: list[OutputComparison],
                     tilings: dict[int, Tiling | None]) -> list[OutputComparison]:
    """Mismatched outputs a wrapper made from a kernel output, with the blocks and programs
    of the kernel output their wrong elements came from (and the trace, for the causes)."""
    wanted = [i for i, o in enumerate(outputs) if o.kernel is None and any(
        p.error is None and not p.allclose for p in o.pairs)]
    for i, trace in (trace_outputs(prepared, wanted) if tilings else {}).items():
        outputs[i] = dataclasses.replace(
            outputs[i], pairs=traced_pairs(outputs[i].pairs, trace, prepared, tilings),
            traced=trace)
    return outputs


def _shape_dtype(results: Sequence[RunResult], i: int, prepared: Prepared
                 ) -> tuple[tuple[int, ...], np.dtype]:
    for r in results:
        if r.outputs is not None:
            return tuple(r.outputs[i].shape), r.outputs[i].dtype
    aval = prepared.capture.handle.closed_jaxpr.out_avals[i]
    return tuple(aval.shape), np.dtype(aval.dtype)


def _output_tiling(info: OutputInfo, tilings: dict[int, Tiling | None]) -> OperandTiling | None:
    if info.kernel is None or info.origin is None:
        return None
    t = tilings.get(info.kernel)
    return t.operands.get(info.origin) if t is not None else None


def _writers(prepared: Prepared, info: OutputInfo) -> np.ndarray | None:
    """For a GPU kernel on whole-array refs (every window the whole output, so the windows
    cannot say who wrote what): each element's last storing program, from its stores."""
    from pallaslab.analysis.gpu_stores import last_writers

    kernel = prepared.capture[info.kernel] if info.kernel is not None else None
    return last_writers(kernel, info.origin) if kernel is not None and info.origin else None


def _pair(ra: RunResult, rb: RunResult, i: int, ot: OperandTiling | None,
          tiling: Tiling | None, rtol: float | None, atol: float | None,
          equal_nan: bool, writers: np.ndarray | None = None) -> PairComparison:
    if ra.outputs is None or rb.outputs is None:
        failed = ra if ra.outputs is None else rb
        empty = np.zeros((0,), bool)
        return PairComparison(ra.executor, rb.executor, float("nan"), float("nan"), 0, 0,
                              False, 0.0, 0.0, empty.astype(float), empty, (), (),
                              error=f"{failed.executor} failed: {failed.error}")
    a, b = ra.outputs[i], rb.outputs[i]
    return compare_arrays(a, b, ra.executor, rb.executor, ot, tiling, rtol=rtol, atol=atol,
                          equal_nan=equal_nan, writers=writers)



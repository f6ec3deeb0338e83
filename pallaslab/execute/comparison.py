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

ULP distance counts representable floats between the two values (integers: |a - b|).

Honest verdicts: each executor's status (ran / unavailable / failed / timed-out) is kept;
only executors that ran are compared; a comparison where fewer than two ran is *incomplete*
(`complete` False, `allclose` False), never a pass.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from pallaslab.analysis.findings import Finding
from pallaslab.analysis.tiling import OperandTiling, Tiling, tile
from pallaslab.execute.data import DEFAULT_SEED
from pallaslab.execute.executors import (
    EXECUTOR_NAMES,
    Executor,
    ExecutorError,
    Prepared,
    execute,
    get_executor,
    prepare,
)
from pallaslab.execute.isolation import time_limit
from pallaslab.execute.mesh_stepping import core_mismatches
from pallaslab.execute.result import OutputInfo, RunResult, RunStatus
from pallaslab.model import Kernel

DEFAULT_RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1.6e-2}
FLOAT8_RTOL = 1.25e-1


def default_rtol(dtype: Any) -> float:
    dt = np.dtype(dtype)
    if dt.name in DEFAULT_RTOL:
        return DEFAULT_RTOL[dt.name]
    if "float8" in dt.name or "float4" in dt.name:
        return FLOAT8_RTOL
    if np.issubdtype(dt, np.complexfloating):
        return DEFAULT_RTOL["float64" if dt.itemsize == 16 else "float32"]
    return 0.0


@dataclasses.dataclass(frozen=True)
class PairComparison:
    """Executor `a` against executor `b` on one output."""

    a: str
    b: str
    max_abs_err: float
    max_rel_err: float
    max_ulp: int
    mismatched_elements: int
    allclose: bool
    rtol: float
    atol: float
    abs_err: np.ndarray  # |a - b| (float64; inf where exactly one side is NaN)
    mismatch: np.ndarray  # bool mask, the output's shape
    mismatched_blocks: tuple[tuple[int, ...], ...]  # output block indices with a mismatch
    programs: tuple[tuple[int, ...], ...]  # grid programs that wrote those blocks
    error: str | None = None  # one side did not run

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a, "b": self.b, "max_abs_err": _finite(self.max_abs_err),
            "max_rel_err": _finite(self.max_rel_err), "max_ulp": int(self.max_ulp),
            "mismatched_elements": int(self.mismatched_elements),
            "allclose": bool(self.allclose), "rtol": self.rtol, "atol": self.atol,
            "mismatched_blocks": [list(b) for b in self.mismatched_blocks],
            "programs": [list(p) for p in self.programs],
            "error": self.error,
        }


@dataclasses.dataclass(frozen=True)
class OutputComparison:
    origin: str  # the kernel output's origin ("outputs[0]"), or "result[i]"
    kernel: int | None
    shape: tuple[int, ...]
    dtype: np.dtype
    block_shape: tuple[int, ...] | None  # block extent, for drawing block boundaries
    pairs: tuple[PairComparison, ...]

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "kernel": self.kernel, "shape": list(self.shape),
                "dtype": str(self.dtype),
                "block_shape": list(self.block_shape) if self.block_shape else None,
                "pairs": [p.to_json() for p in self.pairs]}


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

    @property
    def statuses(self) -> dict[str, ExecutorStatus]:
        return {r.executor: ExecutorStatus(r.status, r.reason) for r in self.results}

    @property
    def ran(self) -> tuple[str, ...]:
        return tuple(r.executor for r in self.results if r.status == "ran")

    @property
    def complete(self) -> bool:
        """At least two executors ran, so there was something to compare."""
        return len(self.ran) >= 2

    @property
    def allclose(self) -> bool:
        """Complete, and every pair of executors that ran agrees on every output."""
        return self.complete and all(p.allclose for o in self.outputs for p in o.pairs)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for r in self.results for f in r.findings)

    @property
    def passed(self) -> bool:
        """All close, and no run reported an error (a race, unwritten output, ...)."""
        return self.allclose and not any(f.severity == "error" for f in self.findings)

    def verdict(self) -> str:
        """One line: pass, mismatch, errors found, or why the comparison is incomplete."""
        if not self.complete:
            missing = "; ".join(f"{name}: {s.status} ({s.reason})"
                                for name, s in self.statuses.items() if s.status != "ran")
            return (f"INCOMPLETE: only {len(self.ran)} of {len(self.results)} executor(s) ran, "
                    f"nothing was compared with two: {missing}")
        if not self.allclose:
            return "MISMATCH"
        if not self.passed:
            codes = sorted({f.code for f in self.findings if f.severity == "error"})
            return f"all close, but the runs found errors: {', '.join(codes)}"
        return "all close"

    def result(self, executor: str) -> RunResult:
        for r in self.results:
            if r.executor == executor:
                return r
        raise KeyError(f"no executor {executor!r}; compared: {', '.join(self.executors)}")

    def mismatched_programs(self) -> tuple[tuple[int, ...], ...]:
        """Every program that wrote a mismatched block (any output, any pair)."""
        seen: dict[tuple[int, ...], None] = {}
        for o in self.outputs:
            for p in o.pairs:
                seen.update(dict.fromkeys(p.programs))
        return tuple(seen)

    def to_json(self) -> dict[str, Any]:
        """The contract of `pallaslab compare --json` (design.md), plus run details."""
        return {
            "executors": list(self.executors),
            "executors_status": {k: v.to_json() for k, v in self.statuses.items()},
            "complete": self.complete, "allclose": self.allclose, "passed": self.passed,
            "verdict": self.verdict(), "notes": list(self.notes),
            "outputs": [o.to_json() for o in self.outputs],
            "runs": [{"executor": r.executor, "ok": r.ok, "status": r.status,
                      "wall_time": r.wall_time, "compile_time": r.compile_time,
                      "error": r.error, "unavailable": r.unavailable,
                      "timed_out": r.timed_out, "notes": list(r.notes),
                      "findings": [f.to_json() for f in r.findings]} for r in self.results],
        }


def compare(fn: Callable[..., Any] | Kernel, *args: Any,
            executors: Sequence[str | Executor] | str | None = None,
            reference: Callable[..., Any] | None = None, rtol: float | None = None,
            atol: float | None = None, seed: int = DEFAULT_SEED, timeout: float | None = None,
            equal_nan: bool = False, devices: int | None = None, **kwargs: Any) -> Comparison:
    """Run `fn(*args, **kwargs)` under each executor and compare every pair that ran.

    `executors` is a sequence of names (or one comma-separated string, "interpret,reference").
    None chooses (see `default_executors`): an interpreter that can run the kernels against
    the reference, or against TPU interpret mode; the comparison's notes say which.
    Each run has a time limit of `timeout` seconds (see `pallaslab.execute.isolation`). An
    executor that cannot run here (e.g. `device` without a TPU/GPU), fails or runs out of
    time is reported in `statuses` and the others are still compared; with fewer than two
    runs the comparison is incomplete (`complete` False), never a pass.
    `devices=N` runs every executor (the reference too) on N simulated CPU devices, in a worker
    process (see `pallaslab.execute.executors.check_devices`).
    """
    _check_tolerance("rtol", rtol)
    _check_tolerance("atol", atol)
    runners = None if executors is None else _runners(check_executors(executors), reference)
    time_limit(timeout)  # a bad limit is an error before anything runs
    prepared = prepare(fn, args, kwargs, seed=seed, devices=devices)
    notes: tuple[str, ...] = ()
    if runners is None:
        from pallaslab.execute.auto import default_executors

        names, note = default_executors(prepared.capture, reference, prepared.devices)
        runners, notes = _runners(list(names), reference), (note,)
    results = tuple(execute(r, prepared, timeout=timeout) for r in runners)
    compared = compare_results(prepared, results, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if on_devices := devices_note(prepared):
        notes = (*notes, on_devices)
    notes = (*notes, *device_mismatches(compared), *core_mismatches(compared))
    return dataclasses.replace(compared, notes=notes) if notes else compared


def device_mismatches(comparison: Comparison) -> list[str]:
    """For a run on several devices: which device's shard of each output mismatches, and the
    DMA (its ring step, sending device and line) that last wrote the first wrong element."""
    lines = []
    for result in comparison.results:
        record = result.device_record
        if record is None or record.num_devices < 2 or result.executor != "tpu-interpret":
            continue  # (gpu-interpret's record numbers blocks, not devices)
        for out in comparison.outputs:
            for pair in out.pairs:
                if result.executor in (pair.a, pair.b) and pair.mismatch.any():
                    lines += _shard_mismatches(record, out.origin, pair.mismatch)
    return lines


def _shard_mismatches(record: Any, origin: str, mismatch: np.ndarray) -> list[str]:
    n = record.num_devices
    if mismatch.ndim == 0 or mismatch.shape[0] % n:
        return []  # not split in equal shards along its first axis: no device to name
    rows = mismatch.shape[0] // n
    written = {t.dst_origin for t in record.transfers
               if t.dst_origin and t.dst_origin.startswith("outputs")}
    # A shard_map's result is its kernel's output, gathered: one kernel output, that one.
    buffer = origin if origin in written or len(written) != 1 else next(iter(written))
    lines = []
    for d in range(n):
        local = mismatch[d * rows:(d + 1) * rows]
        if not local.any():
            continue
        first = tuple(int(i) for i in np.argwhere(local)[0])
        writer = record.last_writer(d, buffer, first)
        how = ("written by no DMA (the kernel's own store, or nothing)" if writer is None else
               f"last written by the DMA of step {writer.step} from device {writer.src_device}"
               f" ({writer.source.rsplit('/', 1)[-1] if writer.source else '?'})")
        lines.append(f"device {d} (rows {d * rows}-{(d + 1) * rows - 1} of {origin}): "
                     f"{int(local.sum()):,} mismatched elements; the first, {first} on the "
                     f"device, was {how}")
    return lines


def devices_note(prepared: Prepared) -> str | None:
    """What `devices=N` means for the comparison, when this process has another count."""
    here = jax.device_count()
    if prepared.devices is None or prepared.devices == here:
        return None
    return (f"ran on {prepared.devices} simulated CPU devices in a worker process; the "
            f"kernels shown were captured here on {here} device(s), so mismatches are not "
            "attributed to programs")


def _runners(names: Sequence[str | Executor], reference: Callable[..., Any] | None
             ) -> list[Executor]:
    runners = [get_executor(e, reference=reference) for e in names]
    if reference is None and any(r.name == "reference" for r in runners):
        raise ExecutorError("the reference executor needs a reference function: pass "
                            "reference=my_ref (same signature as the kernel function)")
    return runners


def check_executors(executors: Sequence[str | Executor] | str) -> list[str | Executor]:
    """The executors of a comparison, from names or one comma-separated string."""
    if isinstance(executors, str):
        executors = [e.strip() for e in executors.split(",") if e.strip()]
    names = list(executors)
    labels = [e if isinstance(e, str) else e.name for e in names]
    if len(names) < 2:
        raise ExecutorError(
            f"a comparison needs at least two executors; got {len(names)} "
            f"({', '.join(labels) or 'none'}). "
            f"Choose from {', '.join(EXECUTOR_NAMES)}, e.g. executors=\"interpret,reference\"")
    for label in labels:
        if labels.count(label) > 1:
            raise ExecutorError(f"executor {label!r} is listed twice in {labels}: each "
                                "executor runs once")
    return names


def _check_tolerance(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or \
            not np.isfinite(value) or value < 0:
        raise ExecutorError(f"{name}={value!r}: a tolerance is a finite number >= 0")


def compare_results(prepared: Prepared, results: Sequence[RunResult], *,
                    rtol: float | None = None, atol: float | None = None,
                    equal_nan: bool = False) -> Comparison:
    # Kernels captured here on another device count than the run's may tile differently:
    # then mismatches are not attributed to programs (`devices_note` says so).
    tilings: dict[int, Tiling | None] = {} if devices_note(prepared) else \
        {k.index: tile(k) for k in prepared.capture}
    usable = [r for r in results if r.status == "ran"]
    outputs = []
    for i, info in enumerate(prepared.output_info):
        ot = _output_tiling(info, tilings)
        pairs = tuple(_pair(a, b, i, ot, tilings.get(info.kernel) if info.kernel is not None
                            else None, rtol, atol, equal_nan)
                      for a, b in itertools.combinations(usable, 2))
        shape, dtype = _shape_dtype(usable, i, prepared)
        outputs.append(OutputComparison(
            origin=info.name, kernel=info.kernel, shape=shape, dtype=dtype,
            block_shape=tuple(ot.extent) if ot is not None else None, pairs=pairs))
    return Comparison(tuple(r.executor for r in results), tuple(results), tuple(outputs),
                      tuple(prepared.capture))


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


def _pair(ra: RunResult, rb: RunResult, i: int, ot: OperandTiling | None,
          tiling: Tiling | None, rtol: float | None, atol: float | None,
          equal_nan: bool) -> PairComparison:
    if ra.outputs is None or rb.outputs is None:
        failed = ra if ra.outputs is None else rb
        empty = np.zeros((0,), bool)
        return PairComparison(ra.executor, rb.executor, float("nan"), float("nan"), 0, 0,
                              False, 0.0, 0.0, empty.astype(float), empty, (), (),
                              error=f"{failed.executor} failed: {failed.error}")
    a, b = ra.outputs[i], rb.outputs[i]
    return compare_arrays(a, b, ra.executor, rb.executor, ot, tiling, rtol=rtol, atol=atol,
                          equal_nan=equal_nan)


def compare_arrays(a: np.ndarray, b: np.ndarray, name_a: str = "a", name_b: str = "b",
                   ot: OperandTiling | None = None, tiling: Tiling | None = None, *,
                   rtol: float | None = None, atol: float | None = None,
                   equal_nan: bool = False) -> PairComparison:
    """Compare two arrays; with an output tiling, name the mismatched blocks and programs.
    NaN equals NaN only with `equal_nan`."""
    a, b = np.asarray(a), np.asarray(b)
    wide_a, wide_b = _wide(a), _wide(b)
    rtol = default_rtol(b.dtype) if rtol is None else float(rtol)
    finite_b = np.abs(wide_b[np.isfinite(wide_b)]) if wide_b.size else np.zeros(0)
    scale = float(finite_b.max()) if finite_b.size else 0.0
    atol = rtol * scale if atol is None else float(atol)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(wide_a - wide_b)
        both_nan = np.isnan(wide_a) & np.isnan(wide_b) if equal_nan else \
            np.zeros(diff.shape, bool)
        same_inf = np.isinf(wide_a) & (wide_a == wide_b)
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where((np.isnan(wide_a) | np.isnan(wide_b)) & ~both_nan, np.inf, diff)
        close = (diff <= atol + rtol * np.abs(wide_b)) | both_nan | same_inf
        rel = diff / np.maximum(np.abs(wide_b), np.finfo(np.float64).tiny)
    mismatch = ~close
    mismatched_blocks, programs = _blocks_and_programs(mismatch, ot, tiling)
    return PairComparison(
        a=name_a, b=name_b,
        max_abs_err=_max(diff), max_rel_err=_max(np.where(diff == 0, 0.0, rel)),
        max_ulp=ulp_distance(a, b),
        mismatched_elements=int(mismatch.sum()), allclose=not mismatch.any(),
        rtol=rtol, atol=atol, abs_err=diff, mismatch=mismatch,
        mismatched_blocks=mismatched_blocks, programs=programs,
    )


def _wide(x: np.ndarray) -> np.ndarray:
    if np.issubdtype(x.dtype, np.complexfloating):
        return x.astype(np.complex128)
    return x.astype(np.float64)


def _max(x: np.ndarray) -> float:
    return float(np.nanmax(x)) if x.size and not np.all(np.isnan(x)) else (
        float("nan") if x.size else 0.0)


def _finite(x: float) -> float | None:
    # JSON has no NaN or infinity: null (a NaN on one side only gives an infinite error).
    return float(x) if np.isfinite(x) else None


def ulp_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Largest number of representable values between corresponding elements (NaN pairs
    where only one side is NaN count as the dtype's whole range)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.size == 0:
        return 0
    if not _is_float(a.dtype) or a.dtype != b.dtype:
        if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
            return int(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
        return 0
    bits: Any = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia = _ordered(a.view(bits))
    ib = _ordered(b.view(bits))
    dist = np.abs(ia - ib)
    nan_a, nan_b = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    dist = np.where(nan_a & nan_b, 0, dist)
    dist = np.where(nan_a ^ nan_b, np.iinfo(bits).max, dist)
    return int(dist.max())


def _is_float(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or "float" in np.dtype(dtype).name


def _ordered(i: np.ndarray) -> np.ndarray:
    """Float bit patterns (sign-magnitude) as integers in the floats' order."""
    wide = i.astype(np.int64)
    low = np.iinfo(i.dtype).min
    return np.where(wide < 0, low - wide, wide)


def _blocks_and_programs(mismatch: np.ndarray, ot: OperandTiling | None,
                         tiling: Tiling | None
                         ) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    if ot is None or tiling is None or not mismatch.any():
        return (), ()
    blocks: list[tuple[int, ...]] = []
    uniq, first = np.unique(ot.block_indices, axis=0, return_index=True)
    shape = np.asarray(ot.shape, np.int64)
    covered = np.zeros(mismatch.shape, bool)
    for row in np.argsort(first):
        start = ot.starts[first[row]]
        lo = np.clip(start, 0, shape)
        hi = np.clip(start + np.asarray(ot.extent, np.int64), 0, shape)
        region = tuple(slice(int(x), int(y)) for x, y in zip(lo, hi, strict=True))
        covered[region] = True
        if mismatch[region].any():
            blocks.append(tuple(int(v) for v in uniq[row]))
    # Mismatches no program's block covers (never written): their blocks, no programs.
    stray = np.argwhere(mismatch & ~covered)
    if len(stray):
        extent = np.maximum(np.asarray(ot.extent, np.int64), 1)
        blocks += [tuple(int(v) for v in b) for b in np.unique(stray // extent, axis=0)]
    steps = np.concatenate([ot.steps_with_block(b) for b in blocks]) if blocks else \
        np.zeros(0, np.int64)
    steps = steps.astype(np.int64)
    steps = np.unique(steps)
    return tuple(blocks), tuple(tiling.programs_at(steps))

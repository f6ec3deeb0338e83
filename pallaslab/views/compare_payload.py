"""The Compare view's pure payload: executors side by side, every mismatch traced to the program
that wrote it.

`compare_payload` is the pure function the widget, the report and the tests share. Per output
and per pair of executors: the error |a - b| over the array as a heatmap (float32 binary buffer;
arrays of more than two dimensions are reduced to their last two by max; past `HEAT_SIDE` cells
a side each cell is the max over its elements), the mismatch mask (uint8 buffer, same cells),
the block boundaries, and every mismatched block with the grid programs that wrote it. Above
them, the comparison's own verdict (`Comparison.verdict()`), each executor's status and what
the runs found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pallaslab.analysis.findings import Finding
from pallaslab.analysis.tiling import OperandTiling, Tiling, tile
from pallaslab.execute.pair import is_float
from pallaslab.views._html import visible_payload
from pallaslab.views.arrays import downsample, to_2d

if TYPE_CHECKING:
    from pallaslab.execute import Comparison, OutputComparison, PairComparison
    from pallaslab.model import Kernel

PAYLOAD_VERSION = 1
HEAT_SIDE = 256  # error heatmaps: at most this many cells per side (max-downsampled beyond)
MAX_BLOCKS = 512  # mismatched blocks listed per pair
MAX_WRITERS = 64  # programs listed per block


class MismatchedBlock(TypedDict):
    block: list[int]  # the output block index (all dims)
    window: list[int]  # [row0, row1, col0, col1]: its elements in the 2-D heatmap's array
    programs: list[list[int]]  # the grid programs that wrote it, execution order
    steps: list[int]
    more_programs: int  # writers not listed (beyond MAX_WRITERS)


class ComparePair(TypedDict):
    a: str
    b: str
    max_abs_err: float | None  # None: infinite or NaN (not JSON)
    max_rel_err: float | None
    max_ulp: int
    mismatched_elements: int
    allclose: bool
    rtol: float
    atol: float
    error: str | None  # one side did not run
    nan_a: int  # NaN elements of a (a NaN on one side makes max abs/rel infinite: None)
    nan_b: int
    rounding_note: str | None  # the error is far beyond the output dtype's rounding
    heat: int | None  # table index: float32 rows*cols, max |a - b| per cell (inf kept)
    mask: int | None  # table index: uint8 rows*cols, 1 where a cell holds a mismatch
    blocks: list[MismatchedBlock]
    more_blocks: int  # mismatched blocks not listed


class CompareOutput(TypedDict):
    origin: str
    kernel: int | None
    shape: list[int]
    dtype: str
    floating: bool  # a float output (integers: no ULP column; their |a - b| is max abs)
    block: list[int] | None  # block extent in the heatmap's two dims (rows, cols)
    rows: int  # heatmap cells
    cols: int
    shape2: list[int]  # the 2-D array the cells cover (elements)
    factor: list[int]  # elements per cell (rows, cols)
    note: str | None  # how the array was reduced to 2-D
    pairs: list[ComparePair]


class CompareRun(TypedDict):
    executor: str
    ok: bool
    wall_time: float
    error: str | None
    unavailable: str | None
    status: str  # "ran", "unavailable", "failed" or "timed-out"
    reason: str | None  # why it did not run (None when it ran)
    timed_out: str | None  # what was running when the time limit stopped it
    notes: list[str]  # how it ran, e.g. "in-process: the time limit is soft"


class CompareFinding(TypedDict):
    executor: str  # the run that reported it
    code: str  # e.g. "unwritten-output", "data-race", "debug-check-failed"
    severity: str
    message: str
    operand: str | None
    programs: list[list[int]]


class ComparePayload(TypedDict):
    version: int
    kernel: str
    index: int
    grid: list[int]
    programs: int
    executors: list[str]
    runs: list[CompareRun]
    allclose: bool  # complete and every pair agrees (False when incomplete)
    complete: bool  # at least two executors ran, and every one named (and the reference)
    passed: bool  # all close and no run (nor the static analysis) reported an error finding
    outcome: str  # "pass", "mismatch", "errors" or "incomplete"
    verdict: str  # Comparison.verdict(): one line, why when not a pass
    # what the runs found (races, unwritten output, ...), then the static analysis's errors
    # that a run cannot show (executor STATIC: "static analysis")
    findings: list[CompareFinding]
    warnings: list[str]  # Comparison.warnings: not failures (an error beyond rounding)
    outputs: list[CompareOutput]
    selected: list[int]  # [output, pair] shown first: the first pair with a mismatch
    opened: list[int] | None  # the program last opened in the stepper
    opened_note: str | None  # what opening it did: stepped, tab switched, Grid selected
    interactive: bool
    revision: int
    error: str | None
    tables: list[memoryview]


def compare_payload(comparison: Comparison, kernel: Kernel, tiling: Tiling | None, *,
                    interactive: bool = False, revision: int = 0,
                    opened: Sequence[int] | None = None, opened_note: str | None = None,
                    error: str | None = None) -> ComparePayload:
    """Everything the compare widget draws, from a comparison and the kernel shown (pure)."""
    tables: list[np.ndarray] = []
    infos = comparison.results[0].output_info if comparison.results else ()
    tilings: dict[int, Tiling | None] = {kernel.index: tiling}
    outputs = []
    selected = None
    for i, out in enumerate(comparison.outputs):
        ot, t = _output_tiling(comparison, out, infos[i] if i < len(infos) else None, tilings)
        outputs.append(_output(out, ot, t, tables))
        for j, p in enumerate(out.pairs):
            if selected is None and not p.allclose:
                selected = [i, j]
    return visible_payload(ComparePayload(
        version=PAYLOAD_VERSION, kernel=kernel.name, index=kernel.index,
        grid=list(tiling.grid) if tiling is not None else [],
        programs=tiling.programs if tiling is not None else 0,
        executors=list(comparison.executors),
        runs=[CompareRun(executor=r.executor, ok=r.ok, wall_time=float(r.wall_time),
                         error=r.error, unavailable=r.unavailable, status=r.status,
                         reason=r.reason, timed_out=r.timed_out, notes=list(r.notes))
              for r in comparison.results],
        allclose=comparison.allclose, complete=comparison.complete, passed=comparison.passed,
        outcome=outcome(comparison), verdict=comparison.verdict(),
        findings=[_finding(who, f) for who, f in labelled_findings(comparison)],
        warnings=list(comparison.warnings),
        outputs=outputs, selected=selected or [0, 0],
        opened=list(opened) if opened is not None else None, opened_note=opened_note,
        interactive=interactive,
        revision=revision, error=error, tables=[memoryview(t) for t in tables]))


def outcome(comparison: Comparison) -> str:
    """The verdict's kind (`Comparison.outcome`): "mismatch", "errors" (the kernel's: a run or
    the static analysis found an error, e.g. a race, unwritten output, a deadlock),
    "incomplete" (an executor needed did not run) or "pass"."""
    return comparison.outcome


STATIC = "static analysis"  # the "executor" of the static analysis's findings


def labelled_findings(comparison: Comparison) -> list[tuple[str, Finding]]:
    """(who found it, finding): each run's, then the static analysis's."""
    return [*((r.executor, f) for r in comparison.results for f in r.findings),
            *((STATIC, s.finding) for s in comparison.static_findings)]


def _finding(who: str, f: Finding) -> CompareFinding:
    return CompareFinding(executor=who, code=f.code, severity=f.severity, message=f.message,
                          operand=f.operand, programs=[list(q) for q in f.programs])


def run_status(r: Any) -> str:
    """One executor's status as text: "ran in 0.12 s" or "timed-out: why"."""
    if r.status == "ran":
        return f"ran in {r.wall_time:.3g} s"
    return f"{r.status}: {r.reason}"


def _output_tiling(comparison: Comparison, out: OutputComparison, info: Any,
                   tilings: dict[int, Tiling | None]
                   ) -> tuple[OperandTiling | None, Tiling | None]:
    if out.kernel is None or info is None or info.origin is None:
        return None, None
    if out.kernel not in tilings:
        kernels = {k.index: k for k in comparison.kernels}
        tilings[out.kernel] = tile(kernels[out.kernel]) if out.kernel in kernels else None
    t = tilings[out.kernel]
    return (t.operands.get(info.origin) if t is not None else None), t


def _output(out: OutputComparison, ot: OperandTiling | None, tiling: Tiling | None,
            tables: list[np.ndarray]) -> CompareOutput:
    shape2 = last_two_dims(out.shape)
    rows, cols, factor, note = 1, 1, [1, 1], None
    pairs = []
    for p in out.pairs:
        entry, dims = _pair(p, out, ot, tiling, tables)
        if dims is not None:
            rows, cols, factor, note = dims
        pairs.append(entry)
    if not any(p["heat"] is not None for p in pairs):
        fr, fc = (max(1, -(-s // HEAT_SIDE)) for s in shape2)
        rows, cols, factor = -(-shape2[0] // fr), -(-shape2[1] // fc), [fr, fc]
    extent = out.block_shape
    return CompareOutput(
        origin=out.origin, kernel=out.kernel, shape=list(out.shape), dtype=str(out.dtype),
        floating=is_float(out.dtype), block=list(last_two(extent)) if extent else None,
        rows=rows, cols=cols, shape2=list(shape2), factor=factor, note=note, pairs=pairs)


def _pair(p: PairComparison, out: OutputComparison, ot: OperandTiling | None,
          tiling: Tiling | None, tables: list[np.ndarray]
          ) -> tuple[ComparePair, tuple[int, int, list[int], str | None] | None]:
    heat = mask = None
    dims = None
    if p.error is None and p.abs_err.shape == tuple(out.shape):
        err2, note = to_2d(p.abs_err, squeeze=False)
        mis2, _ = to_2d(p.mismatch, squeeze=False)
        cells, (fr, fc) = downsample(err2.astype(np.float64), HEAT_SIDE, "max")
        mcells, _ = downsample(mis2.astype(np.float64), HEAT_SIDE, "max")
        tables.append(np.ascontiguousarray(cells, "<f4").ravel())
        heat = len(tables) - 1
        tables.append((mcells > 0).astype(np.uint8).ravel())
        mask = len(tables) - 1
        dims = (int(cells.shape[0]), int(cells.shape[1]), [fr, fc], note)
    blocks = [_block(b, out, ot, tiling) for b in p.mismatched_blocks[:MAX_BLOCKS]]
    return ComparePair(
        a=p.a, b=p.b, max_abs_err=finite_or_none(p.max_abs_err),
        max_rel_err=finite_or_none(p.max_rel_err),
        max_ulp=int(p.max_ulp), mismatched_elements=int(p.mismatched_elements),
        allclose=bool(p.allclose), rtol=float(p.rtol), atol=float(p.atol), error=p.error,
        nan_a=int(p.nan_a), nan_b=int(p.nan_b), rounding_note=p.rounding_note, heat=heat,
        mask=mask, blocks=blocks,
        more_blocks=max(0, len(p.mismatched_blocks) - MAX_BLOCKS)), dims


def _block(b: tuple[int, ...], out: OutputComparison, ot: OperandTiling | None,
           tiling: Tiling | None) -> MismatchedBlock:
    steps = ot.steps_with_block(b) if ot is not None else np.zeros(0, np.int64)
    programs = tiling.programs_at(steps, limit=MAX_WRITERS) if tiling is not None else []
    extent = np.asarray(out.block_shape or [1] * len(b), np.int64)
    start = (ot.starts[steps[0]] if len(steps) else np.asarray(b, np.int64) * extent) \
        if ot is not None else np.asarray(b, np.int64) * extent
    shape = np.asarray(out.shape, np.int64)
    lo = np.clip(start, 0, shape)
    hi = np.clip(start + extent, 0, shape)
    (r0, c0), (r1, c1) = last_two(lo.tolist(), pad=0), last_two(hi.tolist(), pad=1)
    return MismatchedBlock(block=[int(v) for v in b], window=[r0, r1, c0, c1],
                           programs=[list(p) for p in programs],
                           steps=[int(s) for s in steps[:MAX_WRITERS]],
                           more_programs=max(0, len(steps) - MAX_WRITERS))


def last_two(v: Sequence[int], pad: int = 1) -> tuple[int, int]:
    """The last two entries of a block index or extent (`pad` before a 1-D one)."""
    v = [int(x) for x in v]
    if len(v) >= 2:
        return v[-2], v[-1]
    return (pad, v[0]) if v else (pad, pad)


def last_two_dims(shape: Sequence[int]) -> tuple[int, int]:
    """The 2-D array a heatmap covers: the last two dims (a 1-D array is one row)."""
    return (int(shape[-2]), int(shape[-1])) if len(shape) >= 2 else \
        (1, int(shape[0]) if shape else 1)


def finite_or_none(x: float) -> float | None:
    """JSON has no inf or NaN: None stands for them."""
    return float(x) if np.isfinite(x) else None


def err_text(x: float | None, nan: bool = False) -> str:
    """An error figure as text (None: inf or NaN; "nan" when NaNs made it infinite)."""
    return ("nan" if nan else "inf/NaN") if x is None else f"{x:.4g}"


def pair_cells(p: PairComparison, floating: bool) -> tuple[str, str, str, str]:
    """max abs, max rel, ULP and NaN counts of a pair as the text and HTML tables show them:
    "nan" where a NaN made the error infinite, "-" for ULP of integers (or of a NaN)."""
    if p.error:
        return "-", "-", "-", "-"
    nan = bool(p.nan_a or p.nan_b)
    abs_err = finite_or_none(p.max_abs_err)
    ulp = "-" if not floating or (nan and abs_err is None) else f"{p.max_ulp:,}"
    return (err_text(abs_err, nan), err_text(finite_or_none(p.max_rel_err), nan), ulp,
            f"{p.nan_a:,} / {p.nan_b:,}" if nan else "-")

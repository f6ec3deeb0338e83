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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pallaslab.analysis.block_accesses import block_accesses, describe_reads
from pallaslab.analysis.findings import Finding
from pallaslab.analysis.tiling import OperandTiling, Tiling, tile
from pallaslab.execute.comparing.pair import is_float
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


class CompareWriters(TypedDict):
    """Per heatmap cell, its first wrong element (else its first element) and that element's
    last writer (from the comparison's value provenance)."""

    element: int  # table index: int32 rows*cols, the element's flat index in the 2-D array
    program: int  # table index: int32 rows*cols, index into `programs` (-1: never written)
    line: int  # table index: int32 rows*cols, index into `lines` (-1: none)
    programs: list[list[int]]
    lines: list[str]
    reads: list[str]  # per program: what it read inside its blocks ("" when not recorded)
    complete: bool  # False: the provenance run stopped before the last program


class CompareCause(TypedDict):
    kind: str  # "index-map", "line", "first-visit", ...
    operand: str | None
    line: str | None
    programs: list[list[int]]
    message: str


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
    writers: CompareWriters | None  # who last wrote each cell's wrong element
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
    causes: list[CompareCause]  # why it is wrong (index map, line, read before first write)
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
        reads = _reads_of(comparison, out, t)
        outputs.append(_output(out, ot, t, tables, reads))
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
            tables: list[np.ndarray], reads: Callable[[tuple[int, ...]], str]
            ) -> CompareOutput:
    shape2 = last_two_dims(out.shape)
    rows, cols, factor, note = 1, 1, [1, 1], None
    pairs = []
    for p in out.pairs:
        entry, dims = _pair(p, out, ot, tiling, tables)
        entry["writers"] = _writers(p, out, tables, reads) if dims is not None else None
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
        rows=rows, cols=cols, shape2=list(shape2), factor=factor, note=note,
        causes=[_cause(c) for c in getattr(out, "causes", ())], pairs=pairs)


def _cause(c: Any) -> CompareCause:
    j = c.to_json()
    return CompareCause(kind=j["kind"], operand=j["operand"], line=j["line"],
                        programs=j["programs"], message=j["message"])


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
        mask=mask, writers=None, blocks=blocks,
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


def _writers(p: PairComparison, out: OutputComparison, tables: list[np.ndarray],
             reads: Callable[[tuple[int, ...]], str]) -> CompareWriters | None:
    """Per heatmap cell (cells as `downsample` makes them), its first wrong element (row-major;
    else its first element) and the program and line that last wrote it."""
    prov = getattr(out, "provenance", None)
    if prov is None or p.error is not None or prov.program_of.shape != tuple(out.shape):
        return None
    R, C = last_two_dims(out.shape)
    mis = np.asarray(p.mismatch, bool).reshape(-1, R, C)
    lead = mis.argmax(axis=0)[None]  # the first leading index holding a wrong element
    program = np.take_along_axis(prov.program_of.reshape(-1, R, C), lead, 0)[0].ravel()
    line = np.take_along_axis(prov.line_of.reshape(-1, R, C), lead, 0)[0].ravel()
    fr, fc = max(1, -(-R // HEAT_SIDE)), max(1, -(-C // HEAT_SIDE))
    rows, cols = -(-R // fr), -(-C // fc)
    r, c = np.divmod(np.arange(R * C, dtype=np.int64), C)
    cell = (r // fr) * cols + c // fc
    score = np.where(mis.any(axis=0).ravel(), 0, R * C) + np.arange(R * C)
    best = np.full(rows * cols, 2 * R * C, np.int64)
    np.minimum.at(best, cell, score)
    element = best % (R * C)
    for table in (element, program[element], line[element]):
        tables.append(np.ascontiguousarray(table, "<i4"))
    n = len(tables)
    return CompareWriters(element=n - 3, program=n - 2, line=n - 1,
                          programs=[list(q) for q in prov.programs], lines=list(prov.lines),
                          reads=[reads(tuple(q)) for q in prov.programs],
                          complete=bool(getattr(prov, "complete", True)))


def _reads_of(comparison: Comparison, out: OutputComparison, tiling: Tiling | None
              ) -> Callable[[tuple[int, ...]], str]:
    """program -> what it read inside its blocks (recorded programs only, else "")."""
    kernel = next((k for k in comparison.kernels if k.index == out.kernel), None)
    if kernel is None or tiling is None or getattr(out, "provenance", None) is None:
        return lambda program: ""
    acc = block_accesses(kernel, tiling)
    return lambda program: describe_reads(acc, program, tiling) or ""


MAX_WRITERS_SAID = 3  # (program, line) pairs said per output in the text and static HTML


def writer_lines(comparison: Comparison, out: OutputComparison, tiling: Tiling | None
                 ) -> list[str]:
    """The wrong elements' last writers in words, most elements first: "8,192 wrong elements
    last written by program (2,) at kernels.py:36, which read x_ref[192:256, 0:128] (all of
    its block)" (what a click on a wrong element shows in the widget)."""
    prov = getattr(out, "provenance", None)
    pair = next((p for p in out.pairs if not p.allclose and p.error is None), None)
    if prov is None or pair is None or prov.program_of.shape != pair.mismatch.shape:
        return []
    wrong = np.asarray(pair.mismatch, bool)
    keys = np.stack([prov.program_of[wrong], prov.line_of[wrong]], axis=1)
    found, counts = np.unique(keys, axis=0, return_counts=True)
    reads = _reads_of(comparison, out, tiling)
    said = []
    for k in np.argsort(-counts, kind="stable")[:MAX_WRITERS_SAID]:
        program, line = (int(v) for v in found[k])
        if program < 0:
            said.append(f"{counts[k]:,} wrong elements never written")
            continue
        ids = tuple(prov.programs[program])
        at = f" at {prov.lines[line]}" if line >= 0 else ""
        read = reads(ids)
        said.append(f"{counts[k]:,} wrong elements last written by program {ids}{at}"
                    + (f", which read {read}" if read else ""))
    return said

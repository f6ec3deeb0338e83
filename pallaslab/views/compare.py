"""The Compare view: executors side by side, every mismatch traced to the program that wrote it.

`compare_payload` is the pure function the widget, the report and the tests share. Per output
and per pair of executors: the error |a - b| over the array as a heatmap (float32 binary buffer;
arrays of more than two dimensions are reduced to their last two by max; past `HEAT_SIDE` cells
a side each cell is the max over its elements), the mismatch mask (uint8 buffer, same cells),
the block boundaries, and every mismatched block with the grid programs that wrote it. A table
gives max abs/rel error, ULP distance and allclose per pair. Above it, the comparison's own
verdict (`Comparison.verdict()`: all close / MISMATCH / errors found / INCOMPLETE when fewer
than two executors ran, never a mismatch or a pass), each executor's status (ran /
unavailable / failed / timed-out, with the reason and the run's notes) and what the runs found
(`unwritten-output`, `data-race`, `debug-check-failed`, ...).

The live widget sets `selection = {"action": "open", "program": [...], "nonce": ...}` when the
user opens a program: `CompareView.open` runs the kernel's stepper to that program, switches the
shown workbench to its Step tab, selects the program in its Grid tab, and says which of these
happened (`opened_note`).

Open it with `compare_workbench(wb, executors=..., reference=...)` (or `%%pallas --compare
interpret,reference=my_ref`); the workbench's Compare tab then shows that comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pallaslab.analysis.tiling import OperandTiling, Tiling, tile
from pallaslab.util.text import visible
from pallaslab.views import _html
from pallaslab.views._html import esc, visible_payload
from pallaslab.views.arrays import downsample, to_2d
from pallaslab.views.base import InteractiveView, View
from pallaslab.views.context import KernelContext
from pallaslab.views.registry import register_tab
from pallaslab.views.session import Call, Session, session
from pallaslab.views.step import StepView

if TYPE_CHECKING:
    from pallaslab.execute import Comparison, OutputComparison, PairComparison
    from pallaslab.model import Kernel

PAYLOAD_VERSION = 1
HEAT_SIDE = 256  # error heatmaps: at most this many cells per side (max-downsampled beyond)
MAX_BLOCKS = 512  # mismatched blocks listed per pair
MAX_WRITERS = 64  # programs listed per block
STATIC_MAX_BLOCKS = 48  # static HTML draws block maps up to this many blocks per side


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
    heat: int | None  # table index: float32 rows*cols, max |a - b| per cell (inf kept)
    mask: int | None  # table index: uint8 rows*cols, 1 where a cell holds a mismatch
    blocks: list[MismatchedBlock]
    more_blocks: int  # mismatched blocks not listed


class CompareOutput(TypedDict):
    origin: str
    kernel: int | None
    shape: list[int]
    dtype: str
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
    complete: bool  # at least two executors ran
    passed: bool  # all close and no run reported an error finding
    outcome: str  # "pass", "mismatch", "errors" or "incomplete"
    verdict: str  # Comparison.verdict(): one line, why when not a pass
    findings: list[CompareFinding]  # what the runs found (races, unwritten output, ...)
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
        findings=[CompareFinding(executor=r.executor, code=f.code, severity=f.severity,
                                 message=f.message, operand=f.operand,
                                 programs=[list(q) for q in f.programs])
                  for r in comparison.results for f in r.findings],
        outputs=outputs, selected=selected or [0, 0],
        opened=list(opened) if opened is not None else None, opened_note=opened_note,
        interactive=interactive,
        revision=revision, error=error, tables=[memoryview(t) for t in tables]))


def outcome(comparison: Comparison) -> str:
    """The verdict's kind: "incomplete" (fewer than two executors ran), "mismatch", "errors"
    (all close, but a run found an error such as a race or unwritten output) or "pass"."""
    if not comparison.complete:
        return "incomplete"
    if not comparison.allclose:
        return "mismatch"
    return "pass" if comparison.passed else "errors"


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
    shape2 = _shape2(out.shape)
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
        block=list(_last2(extent)) if extent else None, rows=rows, cols=cols,
        shape2=list(shape2), factor=factor, note=note, pairs=pairs)


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
        a=p.a, b=p.b, max_abs_err=_finite(p.max_abs_err), max_rel_err=_finite(p.max_rel_err),
        max_ulp=int(p.max_ulp), mismatched_elements=int(p.mismatched_elements),
        allclose=bool(p.allclose), rtol=float(p.rtol), atol=float(p.atol), error=p.error,
        heat=heat, mask=mask, blocks=blocks,
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
    (r0, c0), (r1, c1) = _last2(lo.tolist(), pad=0), _last2(hi.tolist(), pad=1)
    return MismatchedBlock(block=[int(v) for v in b], window=[r0, r1, c0, c1],
                           programs=[list(p) for p in programs],
                           steps=[int(s) for s in steps[:MAX_WRITERS]],
                           more_programs=max(0, len(steps) - MAX_WRITERS))


def _last2(v: Sequence[int], pad: int = 1) -> tuple[int, int]:
    v = [int(x) for x in v]
    if len(v) >= 2:
        return v[-2], v[-1]
    return (pad, v[0]) if v else (pad, pad)


def _shape2(shape: Sequence[int]) -> tuple[int, int]:
    return (int(shape[-2]), int(shape[-1])) if len(shape) >= 2 else \
        (1, int(shape[0]) if shape else 1)


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _tuple(v: Sequence[int]) -> str:
    return f"({', '.join(map(str, v))}{',' if len(v) == 1 else ''})"


def _num(x: float | None) -> str:
    return "inf/NaN" if x is None else f"{x:.4g}"


# --- opening a comparison on a workbench ---------------------------------------------------


def attach_comparison(wb: Any, comparison: Comparison | None = None, *,
                      executors: Sequence[str] | str | None = None,
                      reference: Callable[..., Any] | None = None, call: Call | None = None,
                      timeout: float | None = None, **options: Any) -> Comparison:
    """Compare the workbench's call under `executors` (or attach a ready `comparison`): its
    Compare tab shows it and its Step tab can run to the mismatches. `call` is the user's own
    `(fn, args, kwargs)` when known (the magic); else the captured function is re-run. Each
    run has a time limit of `timeout` seconds (None: the default, see
    `pallaslab.execute.isolation`)."""
    from pallaslab.views.session import attach_workbench

    s = attach_workbench(wb)
    if call is not None:
        s.call = call
    return _set_comparison(s, comparison, executors=executors, reference=reference,
                           timeout=timeout, **options)


def _set_comparison(s: Session, comparison: Comparison | None = None, *,
                    executors: Sequence[str] | str | None = None,
                    reference: Callable[..., Any] | None = None,
                    timeout: float | None = None, **options: Any) -> Comparison:
    from pallaslab.execute import compare

    if comparison is None:
        fn, args, kwargs = s.call_args()
        chosen: Sequence[str] | str = executors or (
            ("interpret", "reference") if reference is not None
            else ("interpret", "tpu-interpret"))
        comparison = compare(fn, *args, executors=chosen, reference=reference, timeout=timeout,
                             **options, **kwargs)
    s.comparison = comparison
    for view in (*s.compare_views.values(), *s.step_views.values()):
        view._refresh()
    return comparison


def user_call(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
              ) -> Call | None:
    """The user's own call, when every argument holds arrays (so executors and a reference
    function can be called with it as written); None when some are static flags or sizes (then
    the captured function is re-run, and a reference gets the array arguments only)."""
    import jax

    def dynamic(v: Any) -> bool:
        leaves = jax.tree_util.tree_leaves(v)
        return bool(leaves) and all(isinstance(x, (jax.Array, np.ndarray, np.generic,
                                                   jax.ShapeDtypeStruct)) for x in leaves)

    if all(dynamic(a) for a in args) and all(dynamic(v) for v in kwargs.values()):
        return fn, tuple(args), dict(kwargs)
    return None


def compare_workbench(wb: Any, executors: Sequence[str] | str | None = None,
                      reference: Callable[..., Any] | None = None, kernel: int | str = 0,
                      timeout: float | None = None, **options: Any) -> View:
    """`wb.compare(executors=..., reference=...)`: run the comparison, return the Compare view
    of one kernel (options: `rtol`, `atol`, `seed`, `equal_nan`; `timeout` seconds per run)."""
    attach_comparison(wb, executors=executors, reference=reference, timeout=timeout, **options)
    view: View = wb.view("compare", kernel)
    return view


# --- the view --------------------------------------------------------------------------------


class CompareView(InteractiveView):
    """A comparison of executors, shown for one kernel of the workbench."""

    name = "compare"
    module = "compare.js"

    def __init__(self, ctx: KernelContext, comparison: Comparison | None = None):
        self.ctx = ctx
        self._comparison = comparison
        self.opened: tuple[int, ...] | None = None
        self.opened_note: str | None = None  # what opening it did (see `open`)
        self.error: str | None = None
        self._revision = 0
        self._nonce: Any = None

    @property
    def comparison(self) -> Comparison:
        if self._comparison is not None:
            return self._comparison
        s = session(self.ctx.capture) if self.ctx.capture is not None else None
        if s is None or s.comparison is None:
            raise LookupError("no comparison: run compare_workbench(wb, executors=...) first")
        return s.comparison

    def open(self, program: Sequence[int]) -> StepView:
        """Run the stepper to `program`, switch the shown workbench to its Step tab and select
        the program in its Grid tab; `opened_note` says which of these happened."""
        ids = tuple(int(p) for p in program)
        assert self.ctx.capture is not None
        s = session(self.ctx.capture)
        step_view = s.step_view(self.ctx)
        step_view.goto(ids)
        self.error = step_view.error
        if self.error is None:
            self.opened = ids
            self.opened_note = self._open_note(s, step_view, ids)
        self._refresh()
        return step_view

    def _open_note(self, s: Session, step_view: StepView, ids: tuple[int, ...]) -> str:
        """Show the stepped program where the user looks, and say where that was (only)."""
        k = self.ctx.kernel.index
        head = (f"stepper at program {_tuple(ids)} "
                f"({step_view.stepper.position:,}/{step_view.tiling.programs:,} programs run)")
        places = []
        if s.show_tab(k, "step"):
            places.append("shown in the Step tab")
        grid = s.highlight(k, step_view.tiling.step_of(ids), ids)
        if grid is not None:
            places.append(f"selected in the Grid {grid}")
        return f"{head}: {' and '.join(places)}" if places else f"{head}; wb.step() shows it"

    def _refresh(self) -> CompareView:
        self._revision += 1
        self._push()
        return self

    def _payload(self, *, live: bool) -> ComparePayload:
        return compare_payload(self.comparison, self.ctx.kernel, self.ctx.tiling,
                               interactive=live, revision=self._revision, opened=self.opened,
                               opened_note=self.opened_note, error=self.error)

    def _on_selection(self, change: Mapping[str, Any]) -> None:
        sel = dict(change["new"] or {})
        if sel.get("action") != "open" or sel.get("nonce") == self._nonce:
            return
        self._nonce = sel.get("nonce")
        if sel.get("program") is not None:
            self.open(sel["program"])

    # --- static forms -------------------------------------------------------------------------

    def to_text(self) -> str:
        c = self.comparison
        lines = [f"Compare {', '.join(c.executors)} for kernel {self.ctx.kernel.index} "
                 f"{self.ctx.kernel.name}: {c.verdict()}", "  executors:"]
        for r in c.results:
            lines.append(f"    {r.executor}: {run_status(r)}")
            lines += [f"      note: {n}" for n in r.notes]
        if c.findings:
            lines.append("  findings of the runs:")
            lines += [f"    {r.executor}: {f.severity} {f.code}"
                      + (f" ({f.operand})" if f.operand else "") + f": {f.message}"
                      for r in c.results for f in r.findings]
        if not c.complete:
            lines.append("  nothing compared: fewer than two executors ran")
        for out in c.outputs:
            lines.append(f"  {out.origin} {out.dtype}{list(out.shape)}"
                         + (f" blocks {list(out.block_shape)}" if out.block_shape else ""))
            for p in out.pairs:
                if p.error is not None:
                    lines.append(f"    {p.a} vs {p.b}: {p.error}")
                    continue
                lines.append(
                    f"    {p.a} vs {p.b}: max abs {_num(_finite(p.max_abs_err))}, max rel "
                    f"{_num(_finite(p.max_rel_err))}, {p.max_ulp:,} ULP, "
                    f"{p.mismatched_elements:,} mismatched, "
                    f"{'allclose' if p.allclose else 'NOT allclose'} (rtol {p.rtol:.3g}, "
                    f"atol {p.atol:.3g})")
                for b, progs in _block_rows(c, out, p, self.ctx)[:16]:
                    lines.append(f"      block {b} written by {progs}")
        return visible("\n".join(lines))

    def to_html(self) -> str:
        c = self.comparison
        k = self.ctx.kernel
        kind = outcome(c)
        verdict = (f'<span class="{"pl-ok" if kind == "pass" else "pl-cmp-bad"} pl-cmp-verdict" '
                   f'data-outcome="{kind}">{esc(c.verdict())}</span>')
        parts = [f'<h3 class="pl-title">Compare <code>{esc(k.name)}</code> '
                 f'<span class="pl-dim">{esc(", ".join(c.executors))}</span> {verdict}</h3>']
        parts.append(_html.table(
            ("executor", "status", "time (s)", "reason / notes"),
            [(r.executor, r.status, f"{r.wall_time:.3g}" if r.status == "ran" else "-",
              "; ".join([r.reason or "", *r.notes]).strip("; ") or "-") for r in c.results],
            numeric=(2,)).replace('class="pl-table"', 'class="pl-table pl-cmp-runs"', 1))
        if c.findings:
            parts.append('<h4 class="pl-cmp-h">Findings of the runs</h4><ul class="pl-findings">'
                         + "".join(
                             f'<li class="pl-finding pl-{esc(f.severity)}"><span class="pl-badge">'
                             f'{esc(f.severity)}</span> <code>{esc(f.code)}</code> '
                             f'<span class="pl-dim">{esc(r.executor)}</span> {esc(f.message)}</li>'
                             for r in c.results for f in r.findings) + "</ul>")
        if not c.complete:
            parts.append('<p class="pl-finding pl-warning">Nothing compared: fewer than two '
                         "executors ran.</p>")
        rows = []
        blocks = []
        for out in c.outputs:
            for p in out.pairs:
                rows.append((out.origin, f"{p.a} vs {p.b}",
                             "-" if p.error else _num(_finite(p.max_abs_err)),
                             "-" if p.error else _num(_finite(p.max_rel_err)),
                             "-" if p.error else f"{p.max_ulp:,}",
                             f"{p.mismatched_elements:,}",
                             p.error or ("yes" if p.allclose else "no")))
                blocks += [(out.origin, f"{p.a} vs {p.b}", b, progs)
                           for b, progs in _block_rows(c, out, p, self.ctx)]
        parts.append(_html.table(("output", "pair", "max abs err", "max rel err", "ULP",
                                  "mismatched", "allclose"), rows, numeric=(2, 3, 4, 5)))
        if blocks:
            parts.append('<h4 class="pl-cmp-h">Mismatched blocks and the programs that wrote '
                         "them</h4>")
            parts.append(_html.table(("output", "pair", "block", "programs"), blocks[:200]))
            parts += _static_maps(c, self.ctx)
        return '<div class="pl-compare-static">' + "".join(parts) + "</div>"


def _block_rows(c: Comparison, out: OutputComparison, p: PairComparison, ctx: KernelContext
                ) -> list[tuple[str, str]]:
    """(block, its writer programs) of a pair, as text."""
    ot = None
    infos = c.results[0].output_info if c.results else ()
    info = next((i for o, i in zip(c.outputs, infos, strict=False) if o is out), None)
    if out.kernel == ctx.kernel.index and ctx.tiling is not None and info is not None:
        ot = ctx.tiling.operands.get(info.origin or "")
    rows = []
    for b in p.mismatched_blocks:
        if ot is not None and ctx.tiling is not None:
            steps = ot.steps_with_block(b)
            progs = ", ".join(str(q) for q in ctx.tiling.programs_at(steps, limit=8))
            progs += " …" if len(steps) > 8 else ""
        else:
            progs = ", ".join(str(q) for q in p.programs[:8])
        rows.append((str(tuple(b)), progs or "none (never written)"))
    return rows


def _static_maps(c: Comparison, ctx: KernelContext) -> list[str]:
    """Per output with blocks: its blocks (last two dims), the mismatched ones marked."""
    maps = []
    for out in c.outputs:
        if not out.block_shape:
            continue
        ext = _last2(out.block_shape)
        shape2 = _shape2(out.shape)
        nb = [max(1, -(-s // max(e, 1))) for s, e in zip(shape2, ext, strict=True)]
        if nb[0] > STATIC_MAX_BLOCKS or nb[1] > STATIC_MAX_BLOCKS:
            continue
        bad = {_last2(b, pad=0) for p in out.pairs for b in p.mismatched_blocks}
        size = max(6, min(24, 320 // max(nb)))
        rects = "".join(
            f'<rect x="{col * size}" y="{r * size}" width="{size - 1}" height="{size - 1}" '
            f'class="{"pl-cmp-bad-block" if (r, col) in bad else "pl-cmp-ok-block"}">'
            f"<title>block ({r}, {col}){' mismatch' if (r, col) in bad else ''}</title></rect>"
            for r in range(nb[0]) for col in range(nb[1]))
        label = f"{out.origin}: blocks, mismatched ones marked"
        maps.append(f'<figure class="pl-map"><svg width="{nb[1] * size}" '
                    f'height="{nb[0] * size}" role="img" aria-label="{esc(label)}">{rects}'
                    f"</svg><figcaption>{esc(label)}</figcaption></figure>")
    return ['<div class="pl-maps">' + "".join(maps) + "</div>"] if maps else []


def _available(ctx: KernelContext) -> bool:
    return ctx.capture is not None and session(ctx.capture).comparison is not None


def _build(ctx: KernelContext, *, executors: Sequence[str] | str | None = None,
           reference: Callable[..., Any] | None = None, timeout: float | None = None,
           **options: Any) -> CompareView:
    """The Compare view of a kernel; with `executors` / `reference` (for a workbench that
    passes view options on: `wb.compare(executors=..., timeout=...)`), compare first."""
    assert ctx.capture is not None
    s = session(ctx.capture)
    if executors is not None or reference is not None:
        _set_comparison(s, executors=executors, reference=reference, timeout=timeout,
                        **options)
    view = s.compare_views.get(ctx.kernel.index)
    if view is None or view.ctx is not ctx:
        view = s.compare_views[ctx.kernel.index] = CompareView(ctx)
    return view


register_tab("compare", order=55, title="Compare", available=_available, build=_build)

"""The Grid/BlockSpec view: the grid as cells, every operand as its blocks.

`grid_payload` is the pure function the widget, the report and the tests share. Block-index
tables cross the wire as int32 binary buffers, one column (P,) per operand dimension, except
that a column which is an affine function of the program ids (`b + sum(a_k * pid_k)`, what
nearly every index map computes) is sent as its coefficients: a 1024 x 1024 grid of an
elementwise kernel then costs a few hundred bytes instead of megabytes. Identical columns
(inputs and outputs sharing an index map) are sent once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

from pallaslab.analysis.findings import Finding, Rules, concurrent_dims, write_back_mask
from pallaslab.analysis.inspection import caller_names, inspect_kernel, operand_labels
from pallaslab.analysis.tiling import OperandTiling, Tiling, tiling_unavailable_reason
from pallaslab.model import Kernel, Operand
from pallaslab.util.text import visible
from pallaslab.views import _html
from pallaslab.views._html import esc, visible_payload
from pallaslab.views.base import View
from pallaslab.views.context import KernelContext
from pallaslab.views.grid_accesses import (
    GridAccesses,
    accesses_html,
    accesses_payload,
    accesses_text,
)
from pallaslab.views.names import source_name
from pallaslab.views.pipeline_manual import nested_grid_text
from pallaslab.views.registry import register_tab

PAYLOAD_VERSION = 1
STATIC_MAX_CELLS = 48  # static HTML draws grids / block maps up to this many cells per side


class IndexColumn(TypedDict):
    affine: list[int] | None  # [b, a_0, ..., a_{rank-1}]: index = b + sum(a_k * pid_k)
    table: int | None  # else: position of its int32 (P,) column in `tables`


class GridOperand(TypedDict):
    origin: str
    param: str | None  # the kernel function's parameter name ("x_ref")
    label: str  # what the widget shows: "x_ref (args[0])", "x_ref (args[0] = x)"
    role: str
    dtype: str
    memory_space: str
    windowed: bool
    shape: list[int]
    block_shape: list[int | None]
    extent: list[int]  # elements per block along each dimension
    scale: list[int]  # element start = block index * scale - offset
    offset: list[int]
    index: list[IndexColumn]
    # Per dimension: the elements of each step's block where it varies (pl.BoundedSlice
    # dims, up to `extent`), else None.
    size: list[IndexColumn | None]
    lo: list[int]  # smallest block index per dimension over the grid
    hi: list[int]  # largest
    fetches: int | None
    hbm_bytes: int | None
    # Outputs: grid dimensions along which programs are separate writers of a block even in
    # consecutive steps (only when a parallel-write-conflict finding names the operand);
    # along the others, a run of consecutive steps on one block is one write-back.
    writer_axes: list[int]


class GridFinding(TypedDict):
    code: str
    severity: str
    message: str
    operand: str | None
    programs: list[list[int]]
    steps: list[int]  # the programs' positions in execution order
    blocks: list[list[int]]


class GridPayload(TypedDict):
    version: int
    kernel: str
    index: int
    source: str | None
    grid: list[int]
    grid_names: list[str] | None
    semantics: list[str] | None
    programs: int
    axes: list[int]  # the two grid dimensions drawn by default (rows, columns)
    operands: list[GridOperand]
    findings: list[GridFinding]
    tables: list[memoryview]  # int32 columns, little-endian
    # Beyond BlockSpecs: the kernel's nested `emit_pipeline`s, each drawn like a pallas_call
    # grid, and one line saying why a kernel has no grid of its own (mesh kernels).
    pipelines: list[NestedGrid]
    note: str | None
    accesses: GridAccesses | None  # what each program touches inside its blocks


class NestedGrid(TypedDict):
    label: str  # "pipeline 0 (tests/kernels_tpu.py:57): grid 2 x 2 x 2"
    payload: GridPayload


def grid_payload(kernel: Kernel, tiling: Tiling, findings: tuple[Finding, ...],
                 callers: Mapping[str, str] | None = None, *,
                 backend: str | None = None) -> GridPayload:
    """Everything the grid widget draws, from a kernel, its tiling and its findings (pure).

    `callers`: input origin -> the caller's expression for it, shown in the labels; `backend`:
    whose rules the findings followed ("tpu", "triton", ...; the kernel's own by default).
    """
    labels = operand_labels(kernel, callers)
    concurrent = concurrent_dims(kernel, len(tiling.grid), Rules.for_kernel(kernel, backend))
    racing = {f.operand for f in findings if f.code == "parallel-write-conflict"}
    ids = tiling.program_ids().astype(np.int64)
    tables: list[np.ndarray] = []
    seen: dict[bytes, int] = {}
    operands = []
    def column(values: np.ndarray) -> IndexColumn:
        """A per-step column as an affine function of the program ids, or a shared table."""
        col = np.ascontiguousarray(values, dtype="<i4")
        coeffs = affine_fit(col, ids, tiling.grid)
        if coeffs is not None:
            return IndexColumn(affine=coeffs, table=None)
        key = col.tobytes()
        if key not in seen:
            seen[key] = len(tables)
            tables.append(col)
        return IndexColumn(affine=None, table=seen[key])

    for ot in tiling.operands.values():
        op = kernel.operand(ot.origin)
        columns = [column(ot.block_indices[:, d]) for d in range(ot.block_indices.shape[1])]
        sizes = [column(ot.sizes[:, d]) if ot.sizes is not None and dim.kind == "bounded"
                 else None for d, dim in enumerate(op.block_dims or ())]
        operands.append(_operand(ot, op, columns, sizes, labels[ot.origin],
                                 concurrent if ot.origin in racing else []))
    rank = len(tiling.grid)
    return visible_payload(GridPayload(
        version=PAYLOAD_VERSION, kernel=kernel.name, index=kernel.index,
        source=source_name(kernel.source, kernel), grid=list(tiling.grid),
        grid_names=list(kernel.grid_names) if kernel.grid_names else None,
        semantics=list(kernel.dimension_semantics) if kernel.dimension_semantics else None,
        programs=tiling.programs,
        axes=[max(rank - 2, 0), max(rank - 1, 0)] if rank >= 2 else [0, 0],
        operands=operands, findings=[_finding(f, tiling) for f in findings],
        tables=[memoryview(t) for t in tables], pipelines=nested_grids(kernel, backend),
        note=None, accesses=accesses_payload(kernel, tiling) if kernel.kind == "pallas_call"
        else None,
    ))


def nested_grids(kernel: Kernel, backend: str | None = None) -> list[NestedGrid]:
    """The nested `emit_pipeline`s of `kernel`, each as the grid payload of its own kernel
    (operands labelled with the enclosing kernel's ref they window)."""
    out = []
    for i, pipe in enumerate(kernel.pipelines):
        insp = inspect_kernel(pipe, backend=backend, chips=())
        where = f" ({source_name(pipe.source, kernel)})" if pipe.source else ""
        label = f"pipeline {i}{where}: grid {nested_grid_text(pipe)}"
        if insp.tiling is None:  # e.g. windows known only at run time: said why
            out.append(NestedGrid(label=label, payload=empty_grid_payload(pipe, backend)))
            continue
        payload = grid_payload(pipe, insp.tiling, insp.findings, backend=backend)
        for op in payload["operands"]:
            outer = pipe.operand(op["origin"]).outer
            if outer is not None:
                op["label"] = f"{op['param'] or op['origin']} (window of {outer})"
        payload["note"] = _undrawn_note(pipe, insp.tiling)
        out.append(NestedGrid(label=label, payload=payload))
    return out


def _undrawn_note(pipe: Kernel, tiling: Tiling) -> str | None:
    """Windows the tiling leaves out: pl.Indirect dims, whose offsets are read from a ref
    while the kernel runs."""
    undrawn = [op.param or op.origin for op in pipe.operands
               if op.windowed and op.origin not in tiling.operands]
    if not undrawn:
        return None
    return (f"not drawn: {', '.join(undrawn)} (pl.Indirect windows: their offsets are read "
            "from a ref while the kernel runs)")


def no_grid_note(kernel: Kernel) -> str:
    """One line saying why a kernel without a tiling has no BlockSpec grid."""
    if kernel.mesh is not None:
        axes = " x ".join(f"{n} on mesh axis {a}" for a, n in kernel.mesh.axes)
        return f"{kernel.mesh.kind} kernel: {axes} (the body runs once per core); no BlockSpec grid"
    return f"no BlockSpec grid: {tiling_unavailable_reason(kernel)}"


def empty_grid_payload(kernel: Kernel, backend: str | None = None) -> GridPayload:
    """A kernel with no tiling of its own: only its nested pipelines and the reason."""
    return visible_payload(GridPayload(
        version=PAYLOAD_VERSION, kernel=kernel.name, index=kernel.index,
        source=source_name(kernel.source, kernel), grid=[], grid_names=None, semantics=None,
        programs=0,
        axes=[0, 0], operands=[], findings=[], tables=[],
        pipelines=nested_grids(kernel, backend), note=no_grid_note(kernel), accesses=None))


def affine_fit(col: np.ndarray, ids: np.ndarray, grid: tuple[int, ...]) -> list[int] | None:
    """[b, a_0, ...] with col == b + ids @ a at every step, or None if no such integers exist."""
    if not len(col):
        return [0] * (len(grid) + 1)
    b = int(col[0])
    coeffs = []
    for k, g in enumerate(grid):
        stride = math.prod(grid[k + 1:])
        coeffs.append(int(col[stride]) - b if g > 1 else 0)
    if ids.shape[1]:
        predicted = b + ids @ np.asarray(coeffs, np.int64)
        if not np.array_equal(predicted, col):
            return None
    elif not np.all(col == b):
        return None
    return [b, *coeffs]


def _operand(ot: OperandTiling, op: Operand, columns: list[IndexColumn],
             sizes: list[IndexColumn | None], label: str, writer_axes: list[int]
             ) -> GridOperand:
    bi = ot.block_indices
    # starts = index * scale - offset; recover scale/offset per dim from the tiling itself.
    scale, offset = [], []
    for d in range(bi.shape[1]):
        s, o = _scale_offset(bi[:, d], ot.starts[:, d], ot.extent[d])
        scale.append(s)
        offset.append(o)
    lo = bi.min(axis=0) if len(bi) else np.zeros(bi.shape[1], np.int32)
    hi = bi.max(axis=0) if len(bi) else np.zeros(bi.shape[1], np.int32)
    return GridOperand(
        origin=ot.origin, param=op.param, label=label, role=ot.role, dtype=str(op.dtype),
        memory_space=op.memory_space,
        windowed=ot.windowed, shape=list(ot.shape),
        block_shape=list(op.block_shape or ot.extent),
        extent=[int(e) for e in ot.extent], scale=scale, offset=offset, index=columns,
        size=sizes,
        lo=[int(v) for v in lo], hi=[int(v) for v in hi], fetches=ot.fetches,
        hbm_bytes=ot.hbm_bytes, writer_axes=list(writer_axes),
    )


def _scale_offset(index: np.ndarray, starts: np.ndarray, extent: int) -> tuple[int, int]:
    if len(index) and np.array_equal(starts, index.astype(np.int64) * extent):
        return int(extent), 0
    if len(index):
        offset = int(index[0]) - int(starts[0])
        return 1, offset
    return int(extent), 0


def _finding(f: Finding, tiling: Tiling) -> GridFinding:
    steps = [tiling.step_of(p) for p in f.programs if len(p) == len(tiling.grid)]
    return GridFinding(code=f.code, severity=f.severity, message=f.message, operand=f.operand,
                       programs=[list(p) for p in f.programs], steps=steps,
                       blocks=[list(b) for b in f.blocks])


def kernel_grid_payload(ctx: KernelContext) -> GridPayload:
    k, tiling = ctx.kernel, ctx.tiling
    if tiling is None:
        return empty_grid_payload(k, ctx.backend)
    return grid_payload(k, tiling, ctx.findings, _callers(ctx), backend=ctx.backend)


def _callers(ctx: KernelContext) -> dict[str, str]:
    return caller_names(ctx.capture, ctx.kernel, ctx.options.get("arg_names"))


def payload_nbytes(payload: GridPayload) -> int:
    """Bytes on the wire: the JSON part plus the binary buffers."""
    import json

    rest = {k: v for k, v in payload.items() if k not in ("tables", "accesses")}
    acc = payload.get("accesses")
    extra = 0 if acc is None else len(json.dumps({k: v for k, v in acc.items()
                                                  if k != "tables"})) + sum(
        t.nbytes for t in acc["tables"])
    return len(json.dumps(rest)) + sum(t.nbytes for t in payload["tables"]) + extra


# --- the view --------------------------------------------------------------------------------


class GridView(View):
    """Grid programs and the blocks of every operand they touch."""

    name = "grid"
    module = "grid.js"

    def __init__(self, ctx: KernelContext):
        self.ctx = ctx

    def payload(self) -> dict[str, Any]:
        return dict(kernel_grid_payload(self.ctx))

    def to_text(self) -> str:
        k, tiling = self.ctx.kernel, self.ctx.tiling
        if tiling is None:
            lines = [f"Grid of kernel {k.index} {k.name}: {no_grid_note(k)}"]
            return visible("\n".join(lines + _nested_text(k, self.ctx.backend)))
        lines = [f"Grid of kernel {k.index} {k.name}: {_grid_text(k.grid)} = {tiling.programs:,} "
                 f"programs; semantics: {', '.join(k.dimension_semantics or ()) or '-'}"]
        labels = operand_labels(k, _callers(self.ctx))
        for ot in tiling.operands.values():
            op = k.operand(ot.origin)
            fetches = "-" if ot.fetches is None else f"{ot.fetches:,}"
            revisits = "-" if ot.fetches is None else f"{tiling.programs - ot.fetches:,}"
            lines.append(f"  {labels[ot.origin]:<20} {ot.role:<7} {op.dtype}{list(op.shape)} "
                         f"block {_block_text(op, ot)}  fetches {fetches}  "
                         f"revisits {revisits}  hbm {_html.num(ot.hbm_bytes)} B")
        lines += [f"  {f.severity} {f.code}: {f.message}" for f in self.ctx.findings]
        if not self.ctx.findings:
            lines.append("  no findings")
        lines += accesses_text(k, tiling)
        return visible("\n".join(lines + _nested_text(k, self.ctx.backend)))

    def to_html(self) -> str:
        k, tiling = self.ctx.kernel, self.ctx.tiling
        if tiling is None:
            return (f'<h3 class="pl-title">Grid <code>{esc(k.name)}</code></h3>'
                    f'<p class="pl-dim pl-grid-note">{esc(no_grid_note(k))}</p>'
                    + _nested_html(k, self.ctx.backend))
        head = (f'<h3 class="pl-title">Grid <code>{esc(k.name)}</code> '
                f'<span class="pl-dim">{esc(_grid_text(k.grid))} = {tiling.programs:,} programs'
                f"</span></h3>")
        labels = operand_labels(k, _callers(self.ctx))
        maps = [_static_program_grid(tiling)]
        maps += [_static_operand(ot, labels[ot.origin]) for ot in tiling.operands.values()]
        rows = [(labels[ot.origin], ot.role, _block_text(k.operand(ot.origin), ot),
                 _html.num(ot.fetches),
                 _html.num(None if ot.fetches is None else tiling.programs - ot.fetches),
                 _html.num(ot.hbm_bytes)) for ot in tiling.operands.values()]
        return (head + '<div class="pl-maps">' + "".join(maps) + "</div>"
                + _html.table(("operand", "role", "block", "fetches", "revisits", "HBM bytes"),
                              rows, numeric=(3, 4, 5))
                + _html.findings_list(self.ctx.findings) + accesses_html(k, tiling)
                + _nested_html(k, self.ctx.backend))


def _nested_text(kernel: Kernel, backend: str | None) -> list[str]:
    lines = []
    for pipe, nested in zip(kernel.pipelines, nested_grids(kernel, backend), strict=True):
        p = nested["payload"]
        lines.append(f"  nested {nested['label']} = {p['programs']:,} programs; semantics: "
                     f"{', '.join(p['semantics'] or ()) or '-'}")
        if p["note"]:
            lines.append(f"    {p['note']}")
        tiling = inspect_kernel(pipe, backend=backend, chips=()).tiling
        tilings = tiling.operands if tiling is not None else {}
        lines += [f"    {op['label']:<28} {op['role']:<7} {op['dtype']}{op['shape']} block "
                  f"{_block_text(pipe.operand(op['origin']), tilings.get(op['origin']))}  "
                  f"fetches {_html.num(op['fetches'])}" for op in p["operands"]]
        lines += [f"    {f['severity']} {f['code']}: {f['message']}" for f in p["findings"]]
    return lines


SIZES_SHOWN = 8  # steps whose BoundedSlice window sizes are listed


def _block_text(op: Operand, ot: OperandTiling | None) -> str:
    """The block shape, a `pl.BoundedSlice` dimension as its bound ("<=16"), followed by the
    sizes its windows take step by step ("(<=16, 128); dim 0 by step: 16, 16, 8" for 40
    rows)."""
    dims = op.block_dims or ()
    if not any(d.kind == "bounded" for d in dims):
        return _html.shape(op.block_shape)
    text = _html.shape(tuple(f"<={d.size}" if d.kind == "bounded" else d.size for d in dims))
    if ot is None or ot.sizes is None:
        return text
    per_dim = []
    for axis, dim in enumerate(dims):
        if dim.kind == "bounded":
            steps = ot.sizes[:SIZES_SHOWN, axis].tolist()
            more = ", ..." if len(ot.sizes) > SIZES_SHOWN else ""
            per_dim.append(f"dim {axis} by step: {', '.join(map(str, steps))}{more}")
    return f"{text}; {'; '.join(per_dim)}"


def _nested_html(kernel: Kernel, backend: str | None) -> str:
    parts = []
    for i, pipe in enumerate(kernel.pipelines):
        insp = inspect_kernel(pipe, backend=backend, chips=())
        if insp.tiling is None:
            parts.append(f'<h4 class="pl-nested">Nested pipeline {i}: grid '
                         f"{esc(nested_grid_text(pipe))}</h4>"
                         f'<p class="pl-dim">{esc(no_grid_note(pipe))}</p>')
            continue
        labels = {op.origin: f"{op.param or op.origin} (window of {op.outer})"
                  for op in pipe.operands}
        maps = [_static_program_grid(insp.tiling)]
        maps += [_static_operand(ot, labels[ot.origin]) for ot in insp.tiling.operands.values()]
        rows = [(labels[ot.origin], ot.role, _block_text(pipe.operand(ot.origin), ot),
                 _html.num(ot.fetches)) for ot in insp.tiling.operands.values()]
        note = _undrawn_note(pipe, insp.tiling)
        parts.append(f'<h4 class="pl-nested">Nested pipeline {i}: grid '
                     f"{esc(nested_grid_text(pipe))} = {insp.tiling.programs:,} programs</h4>"
                     + (f'<p class="pl-dim">{esc(note)}</p>' if note else "")
                     + '<div class="pl-maps">' + "".join(maps) + "</div>"
                     + _html.table(("operand", "role", "block", "fetches"), rows, numeric=(3,))
                     + _html.findings_list(insp.findings))
    return "".join(parts)


def _grid_text(grid: tuple[int | None, ...]) -> str:
    return " x ".join("?" if g is None else str(g) for g in grid) or "()"


def _heat(count: int, top: int) -> str:
    if count <= 0:
        return "var(--pl-empty)"
    pct = 35 + int(65 * count / max(top, 1))
    return f"color-mix(in srgb, var(--pl-accent) {pct}%, var(--pl-bg))"


def _svg(cells: list[tuple[int, int, str, str]], rows: int, cols: int, label: str) -> str:
    size = max(4, min(18, 320 // max(rows, cols, 1)))
    rects = "".join(f'<rect x="{c * size}" y="{r * size}" width="{size - 1}" height="{size - 1}" '
                    f'style="fill:{fill}"><title>{esc(tip)}</title></rect>'
                    for r, c, fill, tip in cells)
    return (f'<figure class="pl-map"><svg width="{cols * size}" height="{rows * size}" '
            f'role="img" aria-label="{esc(label)}">{rects}</svg>'
            f"<figcaption>{esc(label)}</figcaption></figure>")


def _static_program_grid(tiling: Tiling) -> str:
    """Programs (first two grid dims shown as rows/columns of the last two; slice 0 of the rest),
    shaded by how many operands copy a block at that step: inputs fetched when their block
    changes, outputs written back at the end of each run (pale: nothing copied)."""
    grid = tiling.grid
    rows, cols = (grid[-2], grid[-1]) if len(grid) >= 2 else (1, grid[0] if grid else 1)
    if rows > STATIC_MAX_CELLS or cols > STATIC_MAX_CELLS:
        return (f'<p class="pl-dim">Grid {esc(_grid_text(grid))}: too large for the static '
                "map; open the notebook or the report for the interactive view.</p>")
    fetching = np.zeros(tiling.programs, np.int64)
    for ot in tiling.operands.values():
        if ot.windowed:
            fetching += write_back_mask(ot)
    top = len(tiling.operands)
    cells = []
    for r in range(rows):
        for c in range(cols):
            step = r * cols + c
            pid = tiling.program_at(step) if grid else ()
            n = int(fetching[step])
            cells.append((r, c, _heat(n, top), f"program {pid}: step {step}, {n} copies"))
    return _svg(cells, rows, cols, "programs (shade: operands copied at that step)")


def _static_operand(ot: OperandTiling, name: str) -> str:
    """An operand's blocks in its last two dimensions, shaded by fetch count (element-offset
    windows, pl.Element or pl.BoundedSlice, in the block cell where they start)."""
    bi = ot.starts // np.maximum(np.asarray(ot.extent, np.int64), 1)
    if bi.shape[1] == 0 or not len(bi):
        return ""
    lead = bi[0, :-2] if bi.shape[1] > 2 else bi[0, :0]
    rows_sel = np.all(bi[:, : len(lead)] == lead, axis=1) & ot.fetch_mask
    last = bi[rows_sel][:, -2:] if bi.shape[1] >= 2 else np.stack(
        [np.zeros(int(rows_sel.sum()), np.int32), bi[rows_sel][:, 0]], axis=1)
    shape2 = ot.shape[-2:] if len(ot.shape) >= 2 else (1, ot.shape[0])
    ext2 = ot.extent[-2:] if len(ot.extent) >= 2 else (1, ot.extent[0])
    nb = [max(1, -(-s // max(e, 1))) for s, e in zip(shape2, ext2, strict=True)]
    if nb[0] > STATIC_MAX_CELLS or nb[1] > STATIC_MAX_CELLS:
        return ""
    counts = np.zeros(nb, np.int64)
    inside = np.all((last >= 0) & (last < np.asarray(nb)), axis=1)
    np.add.at(counts, (last[inside, 0], last[inside, 1]), 1)
    top = int(counts.max(initial=0))
    cells = [(r, c, _heat(int(counts[r, c]), top), f"block ({r}, {c}): {int(counts[r, c])} "
              "fetch(es)") for r in range(nb[0]) for c in range(nb[1])]
    label = f"{name}: {ot.role} blocks, shade: copies"
    return _svg(cells, nb[0], nb[1], label)


def _available(ctx: KernelContext) -> bool:
    # Mesh kernels and kernels with nested pipelines show those (or say why there is no grid).
    k = ctx.kernel
    tpu_mesh = k.mesh is not None and Rules.for_kernel(k, ctx.backend).tpu
    return (k.kind == "pallas_call" and ctx.tiling is not None) or bool(k.pipelines) or tpu_mesh


register_tab("grid", order=20, title="Grid", available=_available, build=GridView)

"""The Grid view's one structure: a kernel's grid as a tree of parts (`views.parts`).

The view's text and static HTML render this tree, so the grid's shape and program count, each
operand's block, memory space, index map (its source line) and copies, the findings, what the
first programs touch inside their blocks and each nested pipeline are worded here and nowhere
else. The program and block maps are SVG `Markup` drawn here (the text has the table's
fetches and revisits instead).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pallaslab.analysis.findings import Finding, write_back_mask
from pallaslab.analysis.inspection import inspect_kernel, operand_labels
from pallaslab.analysis.tiling import OperandTiling, Tiling, tiling_unavailable_reason
from pallaslab.model import Kernel, Operand
from pallaslab.views import _html
from pallaslab.views._html import esc
from pallaslab.views.grid_accesses import accesses_section
from pallaslab.views.names import source_name
from pallaslab.views.overview_tree import findings_lines, grid_text
from pallaslab.views.parts import Code, Inline, Line, Markup, Part, Section, Table, Text
from pallaslab.views.pipeline_manual import nested_grid_text

STATIC_MAX_CELLS = 48  # static HTML draws grids / block maps up to this many cells per side
SIZES_SHOWN = 8  # steps whose BoundedSlice window sizes are listed
OPERAND_COLUMNS = ("operand", "role", "array", "block", "memory", "index map", "fetches",
                   "revisits", "HBM bytes")
NESTED_COLUMNS = ("operand", "role", "array", "block", "memory", "index map", "fetches")


def grid_tree(kernel: Kernel, tiling: Tiling | None, findings: Sequence[Finding],
              labels: Mapping[str, str], backend: str | None = None) -> Section:
    """The grid (or why there is none), the maps, one row per operand, the findings, what the
    first programs touch inside their blocks, then each nested pipeline."""
    k = kernel
    title: tuple[Inline, ...] = ("Grid of kernel ", f"{k.index} ", Code(k.name))
    nested = [nested_section(i, pipe, k, backend) for i, pipe in enumerate(k.pipelines)]
    if tiling is None:
        note = Line((Text(no_grid_note(k), "dim"),), css="pl-dim pl-grid-note")
        return Section(title, (note, *nested), css="pl-grid-tree")
    children: list[Part] = [maps_markup(tiling, labels),
                            operand_table(k, tiling, labels, OPERAND_COLUMNS)]
    children += findings_lines([_finding(f) for f in findings])
    accesses = accesses_section(k, tiling)
    children += [accesses] if accesses is not None else []
    return Section((*title, f": {heading(k, tiling)}"), (*children, *nested),
                   css="pl-grid-tree")


def heading(kernel: Kernel, tiling: Tiling, grid: str | None = None) -> str:
    """"4 x 3 x 2 = 24 programs; semantics: parallel, parallel, arbitrary"."""
    semantics = ", ".join(kernel.dimension_semantics or ()) or "-"
    return (f"{grid or grid_text(kernel.grid)} = {tiling.programs:,} programs; "
            f"semantics: {semantics}")


def operand_table(kernel: Kernel, tiling: Tiling, labels: Mapping[str, str],
                  columns: Sequence[str]) -> Table:
    """Per operand: its name, role, array, block, memory space, index map's line, the
    blocks it copies and (an outer grid) the steps that revisit a block already there."""
    rows = []
    for ot in tiling.operands.values():
        op = kernel.operand(ot.origin)
        revisits = None if ot.fetches is None else tiling.programs - ot.fetches
        cells: tuple[Inline, ...] = (
            labels[ot.origin], ot.role, f"{op.dtype}{list(op.shape)}", block_text(op, ot),
            op.memory_space,
            (source_name(op.index_map_source, kernel) if ot.windowed else None) or "-",
            _html.num(ot.fetches), _html.num(revisits), _html.num(ot.hbm_bytes))
        rows.append(cells[:len(columns)])
    return Table(tuple(columns), tuple(rows), numeric=tuple(range(6, len(columns))),
                 css="pl-grid-operands")


def _finding(f: Finding) -> dict[str, str]:
    return {"severity": f.severity, "code": f.code, "message": f.message}


def no_grid_note(kernel: Kernel) -> str:
    """One line saying why a kernel without a tiling has no BlockSpec grid."""
    if kernel.mesh is not None:
        axes = " x ".join(f"{n} on mesh axis {a}" for a, n in kernel.mesh.axes)
        return f"{kernel.mesh.kind} kernel: {axes} (the body runs once per core); no BlockSpec grid"
    return f"no BlockSpec grid: {tiling_unavailable_reason(kernel)}"


def undrawn_note(pipe: Kernel, tiling: Tiling) -> str | None:
    """Windows the tiling leaves out: pl.Indirect dims, whose offsets are read from a ref
    while the kernel runs."""
    undrawn = [op.param or op.origin for op in pipe.operands
               if op.windowed and op.origin not in tiling.operands]
    if not undrawn:
        return None
    return (f"not drawn: {', '.join(undrawn)} (pl.Indirect windows: their offsets are read "
            "from a ref while the kernel runs)")


def nested_label(i: int, pipe: Kernel, kernel: Kernel, grid: str | None = None) -> str:
    """"pipeline 0 (kernels_tpu.py:57): grid 2 x 2 x 2", `grid` in place of the shape."""
    where = f" ({source_name(pipe.source, kernel)})" if pipe.source else ""
    return f"pipeline {i}{where}: grid {grid or nested_grid_text(pipe)}"


def nested_labels(pipe: Kernel) -> dict[str, str]:
    """A nested pipeline's operands, named by the enclosing kernel's ref each windows."""
    labels = operand_labels(pipe, None)
    return {op.origin: f"{op.param or op.origin} (window of {op.outer})" if op.outer is not None
            else labels[op.origin] for op in pipe.operands}


def nested_section(i: int, pipe: Kernel, kernel: Kernel, backend: str | None) -> Section:
    """A nested `emit_pipeline` drawn like a pallas_call grid (or why it cannot be)."""
    insp = inspect_kernel(pipe, backend=backend, chips=())
    if insp.tiling is None:
        why = Line((Text(no_grid_note(pipe), "dim"),), css="pl-dim")
        return Section((f"nested {nested_label(i, pipe, kernel)}",), (why,), css="pl-nested")
    labels = nested_labels(pipe)
    title = "nested " + nested_label(i, pipe, kernel,
                                     heading(pipe, insp.tiling, nested_grid_text(pipe)))
    note = undrawn_note(pipe, insp.tiling)
    children: list[Part] = [Line((Text(note, "dim"),), css="pl-dim")] if note else []
    children += [maps_markup(insp.tiling, labels),
                 operand_table(pipe, insp.tiling, labels, NESTED_COLUMNS)]
    children += findings_lines([_finding(f) for f in insp.findings]) if insp.findings else []
    return Section((title,), tuple(children), css="pl-nested")


def block_text(op: Operand, ot: OperandTiling | None) -> str:
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


# --- the maps (HTML only) ---------------------------------------------------------------------


def maps_markup(tiling: Tiling, labels: Mapping[str, str]) -> Markup:
    """The programs map and each operand's blocks map, side by side."""
    maps = [static_program_grid(tiling)]
    maps += [static_operand(ot, labels[ot.origin]) for ot in tiling.operands.values()]
    return Markup('<div class="pl-maps">' + "".join(maps) + "</div>")


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


def static_program_grid(tiling: Tiling) -> str:
    """Programs (first two grid dims shown as rows/columns of the last two; slice 0 of the rest),
    shaded by how many operands copy a block at that step: inputs fetched when their block
    changes, outputs written back at the end of each run (pale: nothing copied)."""
    grid = tiling.grid
    rows, cols = (grid[-2], grid[-1]) if len(grid) >= 2 else (1, grid[0] if grid else 1)
    if rows > STATIC_MAX_CELLS or cols > STATIC_MAX_CELLS:
        return (f'<p class="pl-dim">Grid {esc(grid_text(grid))}: too large for the static '
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


def static_operand(ot: OperandTiling, name: str) -> str:
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

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

from pallaslab.analysis.findings import Finding, Rules, concurrent_dims
from pallaslab.analysis.inspection import caller_names, inspect_kernel, operand_labels
from pallaslab.analysis.tiling import OperandTiling, Tiling
from pallaslab.model import Kernel, Operand
from pallaslab.views._html import visible_payload
from pallaslab.views.base import View
from pallaslab.views.context import KernelContext
from pallaslab.views.grid_accesses import GridAccesses, accesses_payload
from pallaslab.views.grid_tree import (
    grid_tree,
    nested_label,
    nested_labels,
    no_grid_note,
    undrawn_note,
)
from pallaslab.views.names import source_name
from pallaslab.views.parts import Section, to_html, to_text
from pallaslab.views.registry import register_tab

PAYLOAD_VERSION = 1


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
        label = nested_label(i, pipe, kernel)
        if insp.tiling is None:  # e.g. windows known only at run time: said why
            out.append(NestedGrid(label=label, payload=empty_grid_payload(pipe, backend)))
            continue
        payload = grid_payload(pipe, insp.tiling, insp.findings, backend=backend)
        labels = nested_labels(pipe)
        for op in payload["operands"]:
            op["label"] = labels[op["origin"]]
        payload["note"] = undrawn_note(pipe, insp.tiling)
        out.append(NestedGrid(label=label, payload=payload))
    return out


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

    def tree(self) -> Section:
        """The kernel's grid as one tree (`grid_tree`): what the text and HTML render."""
        return grid_tree(self.ctx.kernel, self.ctx.tiling, self.ctx.findings,
                         operand_labels(self.ctx.kernel, _callers(self.ctx)), self.ctx.backend)

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        return to_html(self.tree())


def _available(ctx: KernelContext) -> bool:
    # Mesh kernels and kernels with nested pipelines show those (or say why there is no grid).
    k = ctx.kernel
    tpu_mesh = k.mesh is not None and Rules.for_kernel(k, ctx.backend).tpu
    return (k.kind == "pallas_call" and ctx.tiling is not None) or bool(k.pipelines) or tpu_mesh


register_tab("grid", order=20, title="Grid", available=_available, build=GridView)

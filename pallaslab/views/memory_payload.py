"""The Memory widget's payload: a kernel's VMEM/SMEM per chip, the what-if table and the GPU
figures as plain JSON (`memory_payload`, pure). The view's tree (`memory_tree`) is built from
this payload, so the widget and the static forms read the same figures and words."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypedDict

from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.finding import Finding
from pallaslab.analysis.occupancy import Occupancy, OperandOccupancy
from pallaslab.analysis.whatif import ChipVerdict, WhatIfRow, WhatIfTable, compiler_text
from pallaslab.model import Kernel
from pallaslab.util.names import ref_name
from pallaslab.views._html import visible_payload
from pallaslab.views.memory_gpu import GpuSection

PAYLOAD_VERSION = 1
ROLE_ORDER = {"input": 0, "output": 1, "scratch": 2}


class MemoryOperand(TypedDict):
    origin: str
    label: str  # "x_ref (pipelines[0].args[0], window of args[0])": the user's names
    role: str  # "input" | "output" | "scratch"
    space: str  # "vmem" | "smem" | "semaphore" | "hbm" (nothing on chip)
    dtype: str
    shape: list[int]  # one buffer as the kernel sees it
    padded_shape: list[int]  # after the chip's native tiling
    buffers: int
    buffer_bytes: int  # one padded buffer
    bytes: int  # buffers x buffer_bytes
    padding_bytes: int  # of `bytes`, what the tiling adds


class ChipMemory(TypedDict):
    chip: str  # "v5e"
    target: str  # "tpu-v5e"
    bytes: int  # scoped VMEM the kernel needs
    limit: int
    limit_source: str  # "vmem_limit_bytes" | "chip default"
    capacity: int  # the chip's VMEM
    fits: bool
    over: int  # bytes beyond the limit (0 when within)
    smem_bytes: int
    smem_capacity: int
    semaphores: int
    shared: int  # bytes sequential run_scoped regions reuse: the operands' sum less this
    spill_note: str | None  # a large body value beyond the counted matrix product: a note
    operands: list[MemoryOperand]  # on-chip operands only, inputs, outputs, scratch


class WhatIfChip(TypedDict):
    chip: str
    vmem_bytes: int  # the buffers
    body_bytes: int  # the matrix product the body materialises beside them
    need_bytes: int  # vmem_bytes + body_bytes, judged against the limit
    limit: int
    fits: bool
    predicted_time: float | None  # seconds; None when the pipeline could not be modelled
    compiles: bool | None  # libtpu's verdict (None: no compile was asked for)
    compiler: str | None  # it in words: "ok", "no (18.36 MiB)"


class WhatIfRowPayload(TypedDict):
    block_sizes: str  # repr() of the candidate
    kernel: str
    programs: int | None
    fetches: int | None
    hbm_bytes: int | None
    fits: bool  # on every chip, by the estimate
    compiles: bool | None  # libtpu accepts it on every chip (None: no compile was asked for)
    error: str | None  # the candidate could not be built
    chips: list[WhatIfChip]


class WhatIfPayload(TypedDict):
    chips: list[str]
    rows: list[WhatIfRowPayload]  # best first
    best: int | None  # index of the best fitting row


class MemoryFinding(TypedDict):
    code: str
    severity: str  # as the header and `check` count it
    message: str


class MemoryPayload(TypedDict):
    version: int
    kernel: str
    index: int
    chips: list[ChipMemory]
    what_if: WhatIfPayload | None
    note: str | None  # why there are no bars (a GPU kernel)
    gpu: GpuSection | None  # the Triton compile's figures per GPU, when asked for
    findings: list[MemoryFinding]  # the kernel's VMEM findings, those the header counts


def memory_payload(kernel: Kernel, occupancies: Sequence[Occupancy],
                   table: WhatIfTable | None = None, note: str | None = None,
                   gpu: GpuSection | None = None,
                   findings: Sequence[Finding] = ()) -> MemoryPayload:
    """Everything the Memory widget draws (pure: from occupancies, a what-if table, the GPU
    section and the kernel's VMEM findings)."""
    return visible_payload(MemoryPayload(
        version=PAYLOAD_VERSION, kernel=kernel.name, index=kernel.index,
        chips=[chip_memory(o, memory_labels(kernel)) for o in occupancies],
        what_if=what_if_payload(table) if table is not None else None, note=note, gpu=gpu,
        findings=[MemoryFinding(code=f.code, severity=f.severity, message=f.message)
                  for f in findings]))


def memory_labels(kernel: Kernel, prefix: str = "") -> dict[str, str]:
    """Occupancy origin -> what the views show: the kernel's parameter names for operands,
    run_scoped buffers and (recursively) nested pipelines' buffers with the ref they window."""
    out = {}
    for op in (*kernel.operands, *kernel.scoped):
        origin = prefix + op.origin
        where = f"{origin}, window of {op.outer}" if op.outer else origin
        out[origin] = ref_name(op.param, where) if op.param else (
            f"{origin} (window of {op.outer})" if op.outer else origin)
    for i, pipe in enumerate(kernel.pipelines):
        out.update(memory_labels(pipe, f"{prefix}pipelines[{i}]."))
    return out


def chip_memory(occ: Occupancy, labels: dict[str, str] | None = None) -> ChipMemory:
    ops = sorted((o for o in occ.operands if o.space != "hbm"),
                 key=lambda o: (o.space != "vmem", ROLE_ORDER.get(o.role, 3)))
    return ChipMemory(
        chip=occ.chip, target=get_chip(occ.chip).target, bytes=occ.bytes, limit=occ.limit,
        limit_source=occ.limit_source, capacity=occ.vmem_capacity, fits=occ.fits,
        over=max(0, occ.bytes - occ.limit), smem_bytes=occ.smem_bytes,
        smem_capacity=occ.smem_capacity, semaphores=occ.semaphores, shared=occ.scoped_shared,
        spill_note=occ.shown_spill_note, operands=[_operand(o, labels or {}) for o in ops])


def _operand(o: OperandOccupancy, labels: dict[str, str]) -> MemoryOperand:
    label = labels.get(o.origin, o.origin)
    if not o.scoped:  # both front ends show the label: the 0 bytes are explained there
        label += " (outside scoped VMEM: narrower than 128 lanes)"
    return MemoryOperand(
        origin=o.origin, label=label, role=o.role, space=o.space,
        dtype=o.dtype, shape=list(o.shape),
        padded_shape=list(o.padded_shape), buffers=o.buffers, buffer_bytes=o.buffer_bytes,
        bytes=o.bytes, padding_bytes=o.padding_bytes)


def what_if_payload(table: WhatIfTable) -> WhatIfPayload:
    return WhatIfPayload(chips=list(table.chips), rows=[_what_if_row(r) for r in table.rows],
                         best=0 if table.best is not None else None)


def _what_if_row(r: WhatIfRow) -> WhatIfRowPayload:
    return WhatIfRowPayload(
        block_sizes=repr(r.block_sizes), kernel=r.kernel, programs=r.programs,
        fetches=r.fetches, hbm_bytes=r.hbm_bytes, fits=r.fits, compiles=r.compiles,
        error=r.error, chips=[_what_if_chip(c) for c in r.chips])


def _what_if_chip(c: ChipVerdict) -> WhatIfChip:
    return WhatIfChip(
        chip=c.chip, vmem_bytes=c.vmem_bytes, body_bytes=c.body_bytes, need_bytes=c.need_bytes,
        limit=c.limit, fits=c.fits,
        predicted_time=None if math.isnan(c.predicted_time) else c.predicted_time,
        compiles=None if c.compiler is None else c.compiler.compiles,
        compiler=None if c.compiler is None else compiler_text(c.compiler))


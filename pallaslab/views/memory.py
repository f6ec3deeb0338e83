"""The Memory view: a kernel's VMEM/SMEM per TPU chip as stacked bars, and the block-size what-if.

Per chip, one bar stacks every operand's share of scoped VMEM (buffers x the block padded to the
chip's native tiling, scratch once) against the scoped-VMEM limit the kernel compiles with (and
the chip's VMEM capacity); overflow is marked, with the compiler's spill risk when the body holds
large values. With `what_if=(make, candidates)` the view adds the what-if table (best first,
candidates that do not fit every chip marked: buffers plus the matrix product the body
materialises, the rule of `vmem-spill-risk`); with `compile=True` each candidate is also
compiled with libtpu per chip and the compiler's verdict is shown beside, and ranks. With
`gpu=True` (a Triton kernel) the view adds shared memory, registers, spills and blocks per SM
on a100/h100 from the real Triton compile (`pallaslab.views.memory_gpu`). Numbers come from
`pallaslab.analysis.occupancy` and `pallaslab.analysis.whatif`; `memory_payload` is the pure
function the widget, the report and the tests share. The payload is small (one entry per
operand per chip): plain JSON.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypedDict

from pallaslab.analysis.chips import DEFAULT_CHIPS
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.finding import Finding
from pallaslab.analysis.occupancy import Occupancy, OperandOccupancy, applies, occupancy
from pallaslab.analysis.vmem_findings import VMEM_CODES
from pallaslab.analysis.whatif import (
    ChipVerdict,
    CompilerVerdict,
    WhatIfRow,
    WhatIfTable,
    compiler_text,
    what_if,
)
from pallaslab.model import Capture, Kernel
from pallaslab.util.names import ref_name
from pallaslab.views._html import esc, visible_payload
from pallaslab.views.base import View
from pallaslab.views.context import KernelContext
from pallaslab.views.memory_gpu import GpuSection, gpu_section, mosaic_gpu_section
from pallaslab.views.memory_tree import memory_tree, what_if_section
from pallaslab.views.parts import Section, to_html, to_text
from pallaslab.views.registry import register_tab

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
        smem_capacity=occ.smem_capacity, semaphores=occ.semaphores,
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


def libtpu_verdict(cap: Capture, index: int, chip: str, *,
                   vmem_exact: bool = False) -> CompilerVerdict:
    """libtpu's verdict on kernel `index` of a candidate's capture for `chip` (cached on disk;
    `vmem_exact` bisects the need of a kernel that compiles, about 17 compiles)."""
    from pallaslab.lowering import lower  # the backend layer loads only when a compile is asked

    result = lower(cap, target=get_chip(chip).target, compile=True, vmem_exact=vmem_exact)
    k = next(k for k in result.kernels if k.index == index)
    if k.ok and k.compiled:
        return CompilerVerdict(True, k.resources.vmem_bytes if vmem_exact else None)
    errors = [d.code for d in k.diagnostics if d.severity == "error"]
    return CompilerVerdict(False, k.resources.vmem_bytes, errors[0] if errors else "refused")


# --- the view ---------------------------------------------------------------------------------

WhatIf = tuple[Callable[[Any], Sequence[Any]], Iterable[Any]] | WhatIfTable


class MemoryView(View):
    """VMEM/SMEM per chip against the limit, per operand; the what-if table when asked for.

    `chips` defaults to the workbench's (`%%pallas --chip`, `Workbench(chips=...)`), else v5e
    and v6e. `what_if` is `(make, candidates)` (see `pallaslab.analysis.whatif.what_if`) or a
    table already computed. `compile=True` (workbench option "compile") compiles every
    candidate with libtpu per chip and shows its verdict beside the estimate; `vmem_exact=True`
    also bisects each accepted candidate's true need (about 17 compiles each). `gpu=True`
    compiles the kernel with Triton for a100 and h100 (seconds; cached on disk) and shows
    shared memory, registers, spills and blocks per SM; it defaults to the workbench option
    "gpu". Its notices are the kernel's VMEM findings the header and `check` count; a
    `vmem-spill-risk` that libtpu's exact need contradicts is not shown (`measured`: chip ->
    that need, or measured here when `vmem_exact=True`).
    """

    name = "memory"
    module = "memory.js"

    def __init__(self, ctx: KernelContext, chips: Sequence[str] | str | None = None,
                 what_if: WhatIf | None = None, gpu: bool | None = None,
                 compile: bool | None = None, vmem_exact: bool = False,
                 measured: dict[str, int] | None = None):
        self.ctx = ctx
        self._measured = measured
        ctx.vmem_measured.update(measured or {})
        self.vmem_exact = vmem_exact
        self.compile = vmem_exact or (bool(ctx.options.get("compile")) if compile is None
                                      else compile)
        # A GPU target asked for (--target gpu-h100) means the GPU's figures, as --gpu does.
        self.gpu = bool(ctx.options.get("gpu") or any(t.startswith("gpu-") for t in ctx.targets)
                        ) if gpu is None else gpu
        asked = (chips,) if isinstance(chips, str) else chips
        self.chips = tuple(get_chip(c).name for c in (asked or ctx.chips or DEFAULT_CHIPS))
        self.table: WhatIfTable | None = None
        if isinstance(what_if, tuple):
            self.what_if(*what_if)
        elif what_if is not None:
            self._set_table(what_if)

    @functools.cached_property
    def occupancies(self) -> tuple[Occupancy, ...]:
        if not applies(self.ctx.kernel):
            return ()
        return tuple(occupancy(self.ctx.kernel, c) for c in self.chips)

    @functools.cached_property
    def measured(self) -> dict[str, int]:
        """libtpu's exact scoped-VMEM need per chip: given, or bisected when `vmem_exact`."""
        if self._measured is not None or not (self.vmem_exact and self.occupancies):
            return dict(self._measured or {})
        cap, k = self.ctx.capture, self.ctx.kernel
        verdicts = {c: libtpu_verdict(cap, k.index, c, vmem_exact=True)
                    for c in self.chips} if cap is not None else {}
        need = {c: v.need_bytes for c, v in verdicts.items()
                if v.compiles and v.need_bytes is not None}
        self.ctx.vmem_measured.update(need)  # the header counts what this view shows
        return need

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The kernel's VMEM findings as the header counts them (the context drops the spill
        risks the compiler's measured need contradicts)."""
        _ = self.measured  # measured on first use, when asked for, into the context
        return tuple(f for f in self.ctx.findings if f.code in VMEM_CODES)

    @functools.cached_property
    def gpu_section(self) -> GpuSection | None:
        if self.ctx.kernel.backend == "mosaic_gpu":  # read off the capture: always shown
            return mosaic_gpu_section(self.ctx.kernel, compiled=self.gpu)
        return gpu_section(self.ctx.kernel) if self.gpu else None

    def what_if(self, make: Callable[[Any], Sequence[Any]], candidates: Iterable[Any],
                *, kernel: int | None = None) -> MemoryView:
        """Judge candidate block sizes (`make(candidate) -> (fn, args)`); shows the table."""
        index = self.ctx.kernel.index if kernel is None else kernel
        compiler = functools.partial(libtpu_verdict, vmem_exact=self.vmem_exact) \
            if self.compile else None
        return self._set_table(what_if(make, list(candidates), self.chips, kernel=index,
                                       compiler=compiler))

    def _set_table(self, table: WhatIfTable) -> MemoryView:
        self.table = table
        if "widget" in self.__dict__:
            self.widget.payload = self.payload()
        return self

    def _payload(self) -> MemoryPayload:
        k = self.ctx.kernel
        note = None if applies(k) else (
            f"VMEM occupancy is a TPU notion; this kernel targets {k.backend}"
            + ("" if self.gpu or k.backend == "mosaic_gpu" else ". For shared memory, "
               "registers and blocks per SM from the Triton compile, ask for "
               "wb.memory(gpu=True)."))
        return memory_payload(self.ctx.kernel, self.occupancies, self.table, note,
                              self.gpu_section, self.findings)

    def payload(self) -> dict[str, Any]:
        return dict(self._payload())

    def tree(self) -> Section:
        """The kernel's memory as one tree (`memory_tree`): what the text and HTML render."""
        return memory_tree(self._payload(), self.occupancies)

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        k = self.ctx.kernel
        tree = self.tree()
        chips = ", ".join(self.chips if self.occupancies else ())
        head = (f'<h3 class="pl-title">Memory <code>{esc(k.name)}</code> '
                f'<span class="pl-dim">{esc(chips)}</span></h3>')
        body = "".join(to_html(part) for part in tree.children)
        return f'<div class="pl-memory-static">{head}{body}</div>'


def what_if_table_html(w: WhatIfPayload) -> str:
    """The what-if table alone, as the view shows it."""
    return to_html(what_if_section(w))


def _available(ctx: KernelContext) -> bool:
    # Triton kernels: the GPU section (shared memory, registers, blocks per SM)
    # TPU mesh kernels: their scratch (VMEM, SMEM, semaphores) and run_scoped buffers.
    # Mosaic GPU kernels: shared memory buffers, barriers, warps and blocks per SM.
    k = ctx.kernel
    return (k.kind == "pallas_call" and (applies(k) or k.backend == "triton")) or (
        k.kind == "mesh" and (applies(k) or k.backend == "mosaic_gpu"))


register_tab("memory", order=40, title="Memory", available=_available, build=MemoryView)

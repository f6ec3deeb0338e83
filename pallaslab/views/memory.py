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
from pallaslab.util.text import visible
from pallaslab.views import _html
from pallaslab.views._html import esc, visible_payload
from pallaslab.views.base import View
from pallaslab.views.context import KernelContext
from pallaslab.views.memory_gpu import (
    GpuSection,
    gpu_html,
    gpu_section,
    gpu_text,
    mosaic_gpu_section,
)
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

    def to_text(self) -> str:
        k = self.ctx.kernel
        lines = [f"Memory of kernel {k.index} {k.name}"]
        p = self._payload()
        if p["note"]:
            lines.append(f"  {p['note']}")
        named = {o["origin"]: o["label"] for c in p["chips"] for o in c["operands"]
                 if o["label"] != o["origin"]}
        if named:
            lines.append("  operands: " + "; ".join(named.values()))
        for occ, cm in zip(self.occupancies, p["chips"], strict=True):
            lines += ["  " + line for line in str(occ).splitlines()]
            lines.append(f"    SMEM {_bytes(cm['smem_bytes'])} of {_bytes(cm['smem_capacity'])}"
                         + (f", {cm['semaphores']} semaphore(s)" if cm["semaphores"] else ""))
        lines += [f"  {f['severity']} {f['code']}: {f['message']}" for f in p["findings"]]
        if p["gpu"] is not None:
            lines += gpu_text(p["gpu"])
        if self.table is not None:
            lines.append("What-if (best first; VMEM = buffers+the body's matrix product; "
                         "'!!' = does not fit" + ("; libtpu = the compiler's verdict):"
                                                   if self.table.compiled else "):"))
            lines += ["  " + line for line in str(self.table).splitlines()]
        return visible("\n".join(lines))

    def to_html(self) -> str:
        k = self.ctx.kernel
        p = self._payload()
        chips = ", ".join(c["chip"] for c in p["chips"])
        parts = [f'<h3 class="pl-title">Memory <code>{esc(k.name)}</code> '
                 f'<span class="pl-dim">{esc(chips)}</span></h3>']
        if p["note"]:
            parts.append(f'<p class="pl-dim">{esc(p["note"])}</p>')
        if p["chips"]:
            parts.append(static_bars(p["chips"]))
            parts.append(operand_table(p["chips"]))
            parts.append(findings_html(p["findings"]))
            parts += [f'<p class="pl-dim pl-mem-note">note · {esc(c["chip"])}: '
                      f'{esc(c["spill_note"])}</p>' for c in p["chips"] if c["spill_note"]]
        if p["gpu"] is not None:
            parts.append(gpu_html(p["gpu"]))
        if p["what_if"] is not None:
            parts.append(what_if_table_html(p["what_if"]))
        return f'<div class="pl-memory-static">{"".join(parts)}</div>'


# --- static HTML ------------------------------------------------------------------------------


def findings_html(findings: Sequence[MemoryFinding]) -> str:
    """The VMEM findings, badged with the severity the header counts them with."""
    return "".join(f'<p class="pl-finding pl-{esc(f["severity"])}"><span class="pl-badge">'
                   f'{esc(f["severity"])}</span> <code>{esc(f["code"])}</code> '
                   f'{esc(f["message"])}</p>' for f in findings)


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1 << 20:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / (1 << 20):,.2f} MiB"


def bar_scale(chips: Sequence[ChipMemory]) -> int:
    """Bytes the full bar width stands for: the chip's VMEM (or a larger limit or need), so
    that a bar's fill is the kernel's share of VMEM."""
    return max([max(c["capacity"], c["limit"], c["bytes"]) for c in chips] or [1]) or 1


def _scale_name(chips: Sequence[ChipMemory], scale: int) -> str:
    return "the chip's VMEM" if scale == max(c["capacity"] for c in chips) \
        else "the largest limit or need"


def _pct(n: int, scale: int) -> str:
    return f"{100 * n / scale:.3f}%"


def static_bars(chips: Sequence[ChipMemory]) -> str:
    scale = bar_scale(chips)
    rows = []
    for c in chips:
        segs = []
        for i, o in enumerate(o for o in c["operands"] if o["space"] == "vmem"):
            tip = (f"{o['origin']} ({o['role']}): {o['buffers']} x "
                   f"{'x'.join(map(str, o['padded_shape']))} {o['dtype']} = {_bytes(o['bytes'])}")
            segs.append(f'<span class="pl-seg pl-mem-{esc(o["role"])} pl-shade{i % 3}" '
                        f'style="width:{_pct(o["bytes"], scale)}" title="{esc(tip)}"></span>')
        if c["over"]:  # the part of the bar beyond the limit, hatched
            segs.append(f'<span class="pl-mem-overzone" style="left:{_pct(c["limit"], scale)};'
                        f'width:{_pct(c["over"], scale)}"></span>')
        over = f" by {_bytes(c['over'])}" if c["over"] else ""
        verdict = ('<span class="pl-mem-fits">fits</span>' if c["fits"] else
                   f'<span class="pl-mem-over">overflow{over}</span>')
        rows.append(
            f'<div class="pl-mem-row" data-chip="{esc(c["chip"])}">'
            f'<span class="pl-mem-label">{esc(c["chip"])}</span>'
            f'<span class="pl-mem-track">{"".join(segs)}'
            f'<span class="pl-mem-limit" style="left:{_pct(min(c["limit"], scale), scale)}" '
            f'title="limit {esc(_bytes(c["limit"]))} ({esc(c["limit_source"])})"></span></span>'
            f'<span class="pl-mem-total">{esc(_bytes(c["bytes"]))} / '
            f'{esc(_bytes(c["limit"]))} {verdict}</span></div>')
    legend = ('<div class="pl-mem-legend pl-dim"><span class="pl-key pl-mem-input"></span> '
              'input <span class="pl-key pl-mem-output"></span> output '
              '<span class="pl-key pl-mem-scratch"></span> scratch '
              '<span class="pl-key pl-mem-overzone"></span> over the limit · bar = '
              f"{esc(_bytes(scale))} ({_scale_name(chips, scale)}); the mark is the scoped-VMEM "
              "limit</div>")
    return f'<div class="pl-mem-bars">{"".join(rows)}{legend}</div>'


def operand_table(chips: Sequence[ChipMemory]) -> str:
    """Per-operand bytes per chip, with the totals, limits and fits."""
    origins: dict[str, MemoryOperand] = {}
    for c in chips:
        for o in c["operands"]:
            origins.setdefault(o["origin"], o)
    by_chip = [{o["origin"]: o for o in c["operands"]} for c in chips]
    headers = ["operand", "role", "space", "block", "buffers",
               *[f"{c['chip']} bytes" for c in chips]]
    rows: list[list[Any]] = []
    for origin, o in origins.items():
        cells = [by.get(origin) for by in by_chip]
        rows.append([o["label"], o["role"], o["space"],
                     f"{'x'.join(map(str, o['shape'])) or '()'} {o['dtype']}", o["buffers"],
                     *[_html.num(x["bytes"]) if x else "-" for x in cells]])
    n = len(chips)
    rows.append(["total VMEM", "", "", "", "", *[_html.num(c["bytes"]) for c in chips]])
    rows.append(["limit", "", "", "", "", *[f"{_html.num(c['limit'])} ({c['limit_source']})"
                                            for c in chips]])
    rows.append(["SMEM", "", "", "", "", *[_html.num(c["smem_bytes"]) for c in chips]])
    rows.append(["fits", "", "", "", "", *["yes" if c["fits"] else "NO" for c in chips]])
    html = _html.table(headers, rows, numeric=tuple(range(4, 5 + n)))
    # mark the verdict cells (the table helper escapes every cell; classes added afterwards)
    return html.replace("<td class=\"num\">NO</td>", '<td class="num pl-mem-over">NO</td>')


def _us(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e6:,.2f}"


def _row_verdict(r: WhatIfRowPayload) -> str:
    """The row's verdict naming the chips it fails on: a block size too big for v5e may be
    the fastest fit on v6e."""
    if r["compiles"] is not None:
        refused = [c["chip"] for c in r["chips"] if c["compiles"] is False]
        return "libtpu refuses it on " + ", ".join(refused) if refused else "libtpu compiles it"
    over = [c["chip"] for c in r["chips"] if not c["fits"]]
    if not over:
        return "fits"
    return "fits no chip" if len(over) == len(r["chips"]) else "does not fit " + ", ".join(over)


def _what_if_cells(c: WhatIfChip, compiled: bool) -> str:
    """Buffers + the body's product against the limit, libtpu's verdict, the time."""
    need = _bytes(c["vmem_bytes"]) + (f" + {_bytes(c['body_bytes'])}" if c["body_bytes"] else "")
    cells = (f'<td class="num{"" if c["fits"] else " pl-mem-over"}" title="limit '
             f'{esc(_bytes(c["limit"]))}">{esc(need)}{"" if c["fits"] else " ✗"}</td>')
    if compiled:
        over = "" if c["compiles"] in (True, None) else " pl-mem-over"
        cells += f'<td class="num{over}">{esc(c["compiler"] or "-")}</td>'
    return cells + f'<td class="num">{_us(c["predicted_time"])}</td>'


def what_if_table_html(w: WhatIfPayload) -> str:
    compiled = any(r["compiles"] is not None for r in w["rows"])
    head = "".join(f"<th class=\"num\">{esc(c)} VMEM (buffers + body)</th>"
                   + (f"<th class=\"num\">{esc(c)} libtpu</th>" if compiled else "")
                   + f"<th class=\"num\">{esc(c)} µs</th>" for c in w["chips"])
    body = []
    for i, r in enumerate(w["rows"]):
        accepted = r["fits"] if r["compiles"] is None else r["compiles"]
        cls = "pl-best" if i == w["best"] else ("" if accepted else "pl-nofit")
        if r["error"]:
            span = 4 + (3 if compiled else 2) * len(w["chips"])
            body.append(f'<tr class="pl-nofit"><td>{esc(r["block_sizes"])}</td>'
                        f'<td colspan="{span}">error: {esc(r["error"])}</td></tr>')
            continue
        chips = "".join(_what_if_cells(c, compiled) for c in r["chips"])
        verdict = "best" if i == w["best"] else _row_verdict(r)
        body.append(f'<tr class="{cls}"><td>{esc(r["block_sizes"])}</td><td>{verdict}</td>'
                    f'<td class="num">{_html.num(r["programs"])}</td>'
                    f'<td class="num">{_html.num(r["fetches"])}</td>'
                    f'<td class="num">{_html.num(r["hbm_bytes"])}</td>{chips}</tr>')
    return ('<h4 class="pl-title">What-if: block sizes, best first</h4>'
            '<table class="pl-table pl-whatif"><thead><tr><th>block sizes</th><th>verdict</th>'
            '<th class="num">programs</th><th class="num">fetches</th>'
            f'<th class="num">HBM bytes</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table>")


def _available(ctx: KernelContext) -> bool:
    # Triton kernels: the GPU section (shared memory, registers, blocks per SM)
    # TPU mesh kernels: their scratch (VMEM, SMEM, semaphores) and run_scoped buffers.
    # Mosaic GPU kernels: shared memory buffers, barriers, warps and blocks per SM.
    k = ctx.kernel
    return (k.kind == "pallas_call" and (applies(k) or k.backend == "triton")) or (
        k.kind == "mesh" and (applies(k) or k.backend == "mosaic_gpu"))


register_tab("memory", order=40, title="Memory", available=_available, build=MemoryView)

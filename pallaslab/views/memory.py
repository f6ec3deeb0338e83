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
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pallaslab.analysis.chips import DEFAULT_CHIPS
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.finding import Finding
from pallaslab.analysis.occupancy import Occupancy, applies, occupancy
from pallaslab.analysis.vmem_findings import VMEM_CODES
from pallaslab.analysis.whatif import (
    CompilerVerdict,
    WhatIfTable,
    what_if,
)
from pallaslab.model import Capture
from pallaslab.views._html import esc
from pallaslab.views.base import View
from pallaslab.views.context import KernelContext
from pallaslab.views.memory_gpu import GpuSection, gpu_section, mosaic_gpu_section
from pallaslab.views.memory_payload import MemoryPayload, WhatIfPayload, memory_payload
from pallaslab.views.memory_tree import memory_tree, what_if_section
from pallaslab.views.parts import Section, to_html, to_text
from pallaslab.views.registry import register_tab


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

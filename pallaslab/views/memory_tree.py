"""The Memory view's one structure: a kernel's memory as a tree of parts (`views.parts`).

The view's text and static HTML render this tree, so a chip's verdict, a VMEM finding, a spill
note, the operand table, the GPU figures and the what-if table are worded here and nowhere
else. The stacked bars are a `Markup` drawn here (text shows the operand table instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pallaslab.analysis.occupancy import Occupancy, kib
from pallaslab.views._html import esc, num
from pallaslab.views.memory_gpu import gpu_tree
from pallaslab.views.parts import (
    Badge,
    Code,
    Inline,
    Line,
    Markup,
    Note,
    Part,
    Section,
    Table,
    Text,
)

if TYPE_CHECKING:
    from pallaslab.views.memory_payload import (
        ChipMemory,
        MemoryFinding,
        MemoryOperand,
        MemoryPayload,
        WhatIfChip,
        WhatIfPayload,
        WhatIfRowPayload,
    )

WHAT_IF_TITLE = "What-if: block sizes, best first"


def memory_tree(p: MemoryPayload, occupancies: Sequence[Occupancy]) -> Section:
    """The payload `p` (and the occupancies it was made from) as one tree: why there are no
    bars, the bars and the operand table, each chip's verdict, the findings the header counts,
    the GPU figures and the what-if table."""
    children: list[Part] = [Line((Text(p["note"], "dim"),), css="pl-dim")] if p["note"] else []
    if p["chips"]:
        children += [Markup(static_bars(p["chips"])), operand_table(p["chips"])]
        children += [chip_section(o, c) for o, c in zip(occupancies, p["chips"], strict=True)]
    children += [finding_line(f) for f in p["findings"]]
    if p["gpu"] is not None:
        children.append(gpu_tree(p["gpu"]))
    if p["what_if"] is not None:
        children.append(what_if_section(p["what_if"]))
    return Section(("Memory of kernel ", f"{p['index']} ", Code(p["kernel"])), tuple(children),
                   css="pl-memory-tree")


def chip_section(occ: Occupancy, c: ChipMemory) -> Section:
    """A chip's verdict: the scoped VMEM against the limit, the body's matrix product beside
    the buffers, SMEM, and the compiler's spill risk."""
    verdict = "fits" if c["fits"] else "DOES NOT FIT"
    if c["limit_source"] == "SparseCore subcore VMEM" and not c["limit"]:
        verdict = "DOES NOT RUN: the chip has no SparseCore"
    parts: list[Part] = [Line((f"{occ.kernel} on {c['chip']}: {kib(c['bytes'])} of "
                               f"{kib(c['limit'])} scoped VMEM ({c['limit_source']}) -- ",
                               Text(verdict, "ok" if c["fits"] else "bad")))]
    if occ.product is not None:
        shape, dtype, size = occ.product
        fits = Text("fits" if occ.need_fits else "DOES NOT FIT", "ok" if occ.need_fits else "bad")
        parts.append(Line((f"body: {dtype}{list(shape)} matrix product {kib(size)}: "
                           f"{kib(occ.need_bytes)} with the buffers -- ", fits)))
    parts.append(Line((f"SMEM {kib(c['smem_bytes'])} of {kib(c['smem_capacity'])}"
                       + (f", {c['semaphores']} semaphore(s)" if c["semaphores"] else ""),)))
    if c["spill_note"]:
        parts.append(Note(c["spill_note"], "note", css="pl-dim pl-mem-note"))
    return Section((c["chip"],), tuple(parts), css="pl-mem-chip", data=(("chip", c["chip"]),))


def finding_line(f: MemoryFinding) -> Line:
    """A VMEM finding, badged with the severity the header counts it with."""
    return Line((Badge(f["severity"], "bad" if f["severity"] == "error" else ""), " ",
                 Code(f["code"]), f": {f['message']}"), css=f"pl-finding pl-{f['severity']}")


def operand_table(chips: Sequence[ChipMemory]) -> Table:
    """Per-operand bytes per chip, with the totals, limits and fits."""
    origins: dict[str, MemoryOperand] = {}
    for c in chips:
        for o in c["operands"]:
            origins.setdefault(o["origin"], o)
    by_chip = [{o["origin"]: o for o in c["operands"]} for c in chips]
    rows: list[tuple[Inline, ...]] = []
    for origin, o in origins.items():
        cells = [by.get(origin) for by in by_chip]
        rows.append((o["label"], o["role"], o["space"],
                     f"{'x'.join(map(str, o['shape'])) or '()'} {o['dtype']}", str(o["buffers"]),
                     *[num(x["bytes"]) if x else "-" for x in cells]))

    def total(label: str, cells: Sequence[Inline]) -> tuple[Inline, ...]:
        return (label, "", "", "", "", *cells)

    if any(c["shared"] for c in chips):  # the rows above add up to more than the total
        rows.append(total("shared by sequential run_scoped regions",
                          [f"-{num(c['shared'])}" for c in chips]))
    rows.append(total("total VMEM", [num(c["bytes"]) for c in chips]))
    rows.append(total("limit", [f"{num(c['limit'])} ({c['limit_source']})" for c in chips]))
    rows.append(total("SMEM", [num(c["smem_bytes"]) for c in chips]))
    rows.append(total("fits", [Text("yes", "ok") if c["fits"] else Text("NO", "bad")
                               for c in chips]))
    columns = ("operand", "role", "space", "block", "buffers", *[f"{c['chip']} bytes"
                                                                 for c in chips])
    return Table(columns, tuple(rows), numeric=tuple(range(4, 5 + len(chips))),
                 css="pl-mem-operands")


# --- the what-if table ------------------------------------------------------------------------


def row_verdict(r: WhatIfRowPayload) -> str:
    """The row's verdict naming the chips it fails on: a block size too big for v5e may be
    the fastest fit on v6e."""
    if r["compiles"] is not None:
        refused = [c["chip"] for c in r["chips"] if c["compiles"] is False]
        return "libtpu refuses it on " + ", ".join(refused) if refused else "libtpu compiles it"
    over = [c["chip"] for c in r["chips"] if not c["fits"]]
    if not over:
        return "fits"
    return "fits no chip" if len(over) == len(r["chips"]) else "does not fit " + ", ".join(over)


def _us(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e6:,.2f}"


def _chip_cells(c: WhatIfChip, compiled: bool) -> list[Inline]:
    """Buffers + the body's product (✗: over the limit), libtpu's verdict, the time."""
    need = _bytes(c["vmem_bytes"]) + (f" + {_bytes(c['body_bytes'])}" if c["body_bytes"] else "")
    cells: list[Inline] = [need if c["fits"] else Text(need + " ✗", "bad")]
    if compiled:
        cells.append(Text(c["compiler"] or "-", "bad" if c["compiles"] is False else ""))
    return [*cells, _us(c["predicted_time"])]


def what_if_section(w: WhatIfPayload) -> Section:
    compiled = any(r["compiles"] is not None for r in w["rows"])
    columns = ("block sizes", "verdict", "programs", "fetches", "HBM bytes", *[
        h for c in w["chips"] for h in (f"{c} VMEM (buffers + body)",
                                        *([f"{c} libtpu"] if compiled else []), f"{c} µs")])
    rows: list[tuple[Inline, ...]] = []
    for i, r in enumerate(w["rows"]):
        if r["error"]:
            cells: list[Inline] = [Text(f"error: {r['error']}", "bad")]
        else:
            verdict = Text("best", "ok") if i == w["best"] else row_verdict(r)
            cells = [verdict, num(r["programs"]), num(r["fetches"]), num(r["hbm_bytes"]),
                     *[x for c in r["chips"] for x in _chip_cells(c, compiled)]]
        rows.append((r["block_sizes"], *cells, *[""] * (len(columns) - 1 - len(cells))))
    key = "VMEM = buffers + the body's matrix product; ✗ = over the limit" + (
        "; libtpu = the compiler's verdict" if compiled else "")
    return Section((WHAT_IF_TITLE,), (
        Line((Text(key, "dim"),), css="pl-dim"),
        Table(columns, tuple(rows), numeric=tuple(range(2, len(columns))), css="pl-whatif")),
        css="pl-mem-whatif")


# --- the bars (HTML only) ---------------------------------------------------------------------


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


def _bar(c: ChipMemory, scale: int) -> str:
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
    return (f'<div class="pl-mem-row" data-chip="{esc(c["chip"])}">'
            f'<span class="pl-mem-label">{esc(c["chip"])}</span>'
            f'<span class="pl-mem-track">{"".join(segs)}'
            f'<span class="pl-mem-limit" style="left:{_pct(min(c["limit"], scale), scale)}" '
            f'title="limit {esc(_bytes(c["limit"]))} ({esc(c["limit_source"])})"></span></span>'
            f'<span class="pl-mem-total">{esc(_bytes(c["bytes"]))} / '
            f'{esc(_bytes(c["limit"]))} {verdict}</span></div>')


def static_bars(chips: Sequence[ChipMemory]) -> str:
    scale = bar_scale(chips)
    legend = ('<div class="pl-mem-legend pl-dim"><span class="pl-key pl-mem-input"></span> '
              'input <span class="pl-key pl-mem-output"></span> output '
              '<span class="pl-key pl-mem-scratch"></span> scratch '
              '<span class="pl-key pl-mem-overzone"></span> over the limit · bar = '
              f"{esc(_bytes(scale))} ({_scale_name(chips, scale)}); the mark is the scoped-VMEM "
              "limit</div>")
    return f'<div class="pl-mem-bars">{"".join(_bar(c, scale) for c in chips)}{legend}</div>'

"""Beside the Pipeline view's model: a kernel's manual DMAs and semaphore operations in program
order, and the pipeline model of each nested `emit_pipeline`'s inner grid."""

from __future__ import annotations

import dataclasses
from typing import TypedDict

from pallaslab.analysis.pipeline import PipelineSummary, pipeline
from pallaslab.model import Kernel
from pallaslab.util.names import ref_name
from pallaslab.util.text import visible
from pallaslab.views import _html
from pallaslab.views.names import semaphore_name, source_name
from pallaslab.views.parts import Line, Part, Section, Text
from pallaslab.views.pipeline_record import RunRecord


class ManualOp(TypedDict):
    op: str  # "async copy", "sync copy", "wait", "signal", "read", "dma wait"
    src: str | None  # "x_hbm (args[0], hbm)"
    dst: str | None
    bytes: int | None
    semaphore: str | None
    source: str | None  # "file.py:LINE"
    repeated: bool  # inside a loop of the body: once per iteration


class NestedPipeline(TypedDict):
    label: str
    lines: list[str]  # the model's summary of the inner grid


class DmaTraffic(TypedDict):
    """The headline of a kernel that moves its own data: what its DMAs move, where the
    BlockSpec model (which times only BlockSpec copies) would say 0 B and 100% compute-bound."""
    bytes: int  # what the recorded run's DMAs moved, else what the DMAs as written move once
    dmas: int  # DMAs counted
    lower_bound: bool  # some DMAs not counted: in a loop, of a run-time size, or cut off
    recorded: bool  # from the recorded run (every program, every iteration)
    text: str  # "262,144 B in 12 DMAs (recorded tpu-interpret run)"
    exposed: str  # what the headline says of exposed copy time: not estimated


EXPOSED_NOT_ESTIMATED = "not estimated: the model does not time the kernel's own DMAs"


def dma_traffic(kernel: Kernel, recorded: RunRecord | None) -> DmaTraffic | None:
    """What the kernel's manual DMAs move: the recorded run's when there is one (it counts
    every iteration of a loop), else the DMAs as written, each once (None without DMAs)."""
    if not kernel.dmas:
        return None
    copies = [o for o in recorded["ops"] if o["op"] == "dma"] if recorded else []
    if recorded and copies:
        moved, cut = sum(o["bytes"] or 0 for o in copies), recorded["truncated"]
        text = (f"{'at least ' if cut else ''}{_html.num(moved)} B in {_dmas(len(copies))} "
                f"(recorded {recorded['executor']} run)")
        return DmaTraffic(bytes=moved, dmas=len(copies), lower_bound=cut, recorded=True,
                          text=text, exposed=EXPOSED_NOT_ESTIMATED)
    sizes = [d.nbytes for d in kernel.dmas]
    loops, dynamic = sum(d.repeated for d in kernel.dmas), sizes.count(None)
    why = ([f"{loops} in a loop counted once"] if loops else []) + \
        ([f"{dynamic} of a size known only at run time not counted"] if dynamic else [])
    moved = sum(n or 0 for n in sizes)
    text = (f"{'at least ' if why else ''}{_html.num(moved)} B per program as written "
            f"({'; '.join([_dmas(len(sizes)), *why])})")
    return DmaTraffic(bytes=moved, dmas=len(sizes), lower_bound=bool(why), recorded=False,
                      text=text, exposed=EXPOSED_NOT_ESTIMATED)


def _dmas(n: int) -> str:
    return f"{n:,} DMA{'' if n == 1 else 's'}"


def manual_ops(kernel: Kernel) -> list[ManualOp]:
    """The kernel's manual DMAs and semaphore operations in program order (by source line;
    a DMA before a wait on its own line, as `copy.start(); copy.wait()` chains them)."""
    refs = {op.origin: op for op in (*kernel.operands, *kernel.scoped)}

    def ref(origin: str) -> str:
        op = refs.get(origin)
        if op is None:
            return origin
        return ref_name(op.param, origin, op.memory_space)

    ops: list[tuple[tuple[str, int, int], ManualOp]] = []
    for i, d in enumerate(kernel.dmas):
        ops.append((_order(d.source, 0, i), ManualOp(
            op=f"{d.kind} copy", src=ref(d.src), dst=ref(d.dst), bytes=d.nbytes,
            semaphore=semaphore_name(kernel, d.semaphore),
            source=source_name(d.source, kernel), repeated=d.repeated)))
    for i, so in enumerate(kernel.semaphore_ops):
        ops.append((_order(so.source, 1, i), ManualOp(
            op=so.kind.replace("_", " ") + (" (another core/device)" if so.device else ""),
            src=None, dst=None, bytes=None, semaphore=semaphore_name(kernel, so.semaphore),
            source=source_name(so.source, kernel), repeated=False)))
    return [op for _, op in sorted(ops, key=lambda t: t[0])]


def manual_note(kernel: Kernel) -> str | None:
    if not kernel.dmas and not kernel.semaphore_ops:
        return None
    loops = sum(d.repeated for d in kernel.dmas)
    what = "TMA copies and barrier operations" if kernel.backend == "mosaic_gpu" else \
        "Manual DMAs"
    note = (f"{what} run as the body issues them: the static model lists them in program "
            "order and does not time them.")
    if loops:
        note += (f" {loops} of them sit in a loop of the body and run once per iteration; "
                 "how many iterations is not known statically (the recorded run shows them).")
    return note


def _order(source: str | None, kind: int, i: int) -> tuple[str, int, int]:
    path, _, line = (source or "").rpartition(":")
    return (path, int(line) if line.isdigit() else 1 << 30, kind * 1_000_000 + i)


def nested_pipelines(kernel: Kernel, chip: str) -> list[NestedPipeline]:
    """The pipeline model of each nested emit_pipeline's inner grid (as for a pallas_call)."""
    out = []
    for i, pipe in enumerate(kernel.pipelines):
        label = f"nested pipeline {i}: grid {nested_grid_text(pipe)}"
        try:
            model = pipeline(pipe, chip)
        except ValueError as e:  # e.g. a dynamic inner grid: said, the outer view still renders
            out.append(NestedPipeline(label=label, lines=[f"no model: {visible(str(e))}"]))
            continue
        s = model.summary
        out.append(NestedPipeline(label=label, lines=[
            f"{s.steps:,} steps, predicted {format_time(s.predicted_time)}; compute "
            f"{format_time(s.compute_time)} "
            f"({100 * s.compute_bound_fraction:.0f}% compute-bound); "
            f"exposed copy time {format_time(s.exposed_copy_time)}; HBM traffic "
            f"{_html.num(s.hbm_bytes)} B"]))
    return out


@dataclasses.dataclass(frozen=True)
class NestedTotals:
    """Every nested pipeline's model summed over the kernel's programs."""

    time: float  # seconds
    compute: float
    exposed_copy: float
    hbm_bytes: int


def nested_totals(kernel: Kernel, chip: str) -> NestedTotals | None:
    """The nested pipelines' time, compute, exposed copies and traffic, over the whole kernel:
    a pipeline tiled over the kernel's grid is modelled whole, one that is not runs once per
    program. None without nested pipelines, or when one has no model."""
    if not kernel.pipelines:
        return None
    time = compute = exposed = 0.0
    hbm = 0
    for pipe in kernel.pipelines:
        repeat = 1 if pipe.outer_dims else kernel.programs
        try:
            s = pipeline(pipe, chip).summary
        except ValueError:  # a dynamic inner grid: no total rather than a partial one
            return None
        if repeat is None:
            return None
        time += repeat * s.predicted_time
        compute += repeat * s.compute_time
        exposed += repeat * s.exposed_copy_time
        hbm += repeat * s.hbm_bytes
    return NestedTotals(time, compute, exposed, hbm)


def with_nested(s: PipelineSummary, nested: NestedTotals) -> list[tuple[str, str]]:
    """The headline of a kernel whose body runs nested pipelines: the kernel's own model counts
    the body's work once per step, the nested models count each inner step, so the body's
    compute is the larger of the two (the same work, not added); the traffic is both."""
    body = max(s.compute_time, nested.time)
    total = s.predicted_time - s.compute_time + body
    compute = max(s.compute_time, nested.compute)
    hbm = s.hbm_bytes + nested.hbm_bytes
    return [("predicted time", f"{format_time(total)} (with its nested pipelines)"),
            ("compute", f"{format_time(compute)} ({100 * compute / total:.0f}% compute-bound)"
             if total else format_time(compute)),
            ("exposed copy time", format_time(s.exposed_copy_time + nested.exposed_copy)),
            ("HBM traffic", f"{_html.num(hbm)} B ({_html.num(s.hbm_bytes)} B through the "
                            f"kernel's BlockSpecs, {_html.num(nested.hbm_bytes)} B through its "
                            "nested pipelines)")]


def nested_grid_text(pipe: Kernel) -> str:
    """"4 x 2", or with the enclosing kernel's program ids in its index maps, "2 x 4 x 2
    (the kernel's 2 x its own 4 x 2)"."""
    def dims(grid: tuple[int | None, ...]) -> str:
        return " x ".join("?" if g is None else str(g) for g in grid) or "()"

    if not pipe.outer_dims:
        return dims(pipe.grid)
    return (f"{dims(pipe.grid)} (the kernel's {dims(pipe.grid[:pipe.outer_dims])} x its own "
            f"{dims(pipe.grid[pipe.outer_dims:])})")


def op_text(o: ManualOp) -> str:
    size = "size known only at run time" if o["bytes"] is None else \
        f"{_html.num(o['bytes'])} B"
    what = f"{o['src']} -> {o['dst']}, {size}" if o["src"] else ""
    sem = f"semaphore {o['semaphore']}" if o["semaphore"] else ""
    loop = "in a loop (once per iteration)" if o["repeated"] else ""
    return "; ".join(x for x in (o["op"], what, sem, o["source"] or "", loop) if x)


def manual_parts(kernel: Kernel, chip: str) -> list[Part]:
    """Each nested pipeline's model, then the manual DMAs and semaphores in program order
    and what a static model cannot know about them."""
    parts: list[Part] = [Section((n["label"],), tuple(Line((line,)) for line in n["lines"]),
                                 css="pl-nested") for n in nested_pipelines(kernel, chip)]
    ops = manual_ops(kernel)
    if ops:
        parts.append(Section(
            (f"Manual DMAs and semaphores ({len(ops)}, program order)",),
            (*(Line((op_text(o),)) for o in ops),
             Line((Text(manual_note(kernel) or "", "dim"),), css="pl-dim")), css="pl-manual"))
    return parts


def format_time(t: float) -> str:
    a = abs(t)
    if a == 0:
        return "0 s"
    if a < 1e-6:
        return f"{t * 1e9:,.1f} ns"
    if a < 1e-3:
        return f"{t * 1e6:,.2f} µs"
    if a < 1:
        return f"{t * 1e3:,.2f} ms"
    return f"{t:,.3f} s"

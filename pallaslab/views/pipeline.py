"""The Pipeline view: the TPU software pipeline as a Gantt timeline, the measured profile beside it.

A Triton or Mosaic GPU kernel has no TPU pipeline: its tab shows the GPU time model's prediction
per targeted GPU, its bound and figures (`pipeline_gpu`), beside the measured run and published
timings, as facts (the payload's `gpu`).

The model (`pallaslab.analysis.pipeline`) gives copy-in / compute / write-back events per grid
step on a chip; `PipelineView.profile()` (`wb.profile()`) runs the kernel under `jax.profiler`
(`pallaslab.execute.profile`) and adds the measured kernel / step / op events as a second track
with its own time axis. Hovering a step shows its program ids and durations and announces the
program to the page (a `pallaslab:program` event, and `selection` on click) so the grid view can
light it up.

What crosses the wire to the widget is `pipeline_payload`'s (`views/pipeline_payload.py`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pallaslab.analysis.chips import DEFAULT_CHIPS
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.gpu_model import GpuPrediction
from pallaslab.analysis.occupancy import applies
from pallaslab.analysis.pipeline import COMPUTE, Events, Pipeline, pipeline
from pallaslab.analysis.published import published_lines
from pallaslab.analysis.tiling import Tiling
from pallaslab.execute.registry import executor_of_mode
from pallaslab.views import _html
from pallaslab.views._html import esc, visible_payload
from pallaslab.views.base import InteractiveView
from pallaslab.views.context import KernelContext
from pallaslab.views.parts import Code, Section, to_html, to_text
from pallaslab.views.pipeline_gpu import (
    gpu_facts,
    gpu_lead,
    is_gpu_kernel,
    predictions,
    published_gpu_lines,
    target_gpus,
)
from pallaslab.views.pipeline_manual import (
    dma_traffic,
    format_time,
    manual_note,
    manual_ops,
    manual_parts,
    nested_pipelines,
    nested_totals,
    with_nested,
)
from pallaslab.views.pipeline_payload import (
    PAYLOAD_VERSION,
    PROFILE_STEP_KIND,
    STATIC_BINS,
    GpuPayload,
    PipelinePayload,
    lane_busy,
    measured_fact,
    measured_info,
    pipeline_payload,
    step_at,
)
from pallaslab.views.pipeline_record import RunRecord, run_record
from pallaslab.views.pipeline_tree import pipeline_tree
from pallaslab.views.registry import register_tab

if TYPE_CHECKING:
    from pallaslab.execute.profile import ProfileTimeline
    from pallaslab.execute.result import RunResult

class PipelineView(InteractiveView):
    """The predicted pipeline timeline on one chip, with the measured profile when taken."""

    name = "pipeline"
    module = "pipeline.js"

    def __init__(self, ctx: KernelContext, chip: str | None = None,
                 profile: ProfileTimeline | bool | None = None,
                 result: RunResult | None = None):
        """`chip` defaults to the workbench's first (`--chip`), else v5e. `profile=True` runs
        the kernel under the profiler now (as `.profile()` does); a `ProfileTimeline` is shown
        as it is. `result`: a tpu-interpret run whose record of manual DMAs and semaphores to
        show (by default the workbench's comparison's, else one run when first shown)."""
        self.ctx = ctx
        if result is not None:
            self.__dict__["recorded_run"] = result
        self.chip = get_chip(chip or (ctx.chips[0] if ctx.chips else DEFAULT_CHIPS[0])).name
        self.measured = None if isinstance(profile, bool) else profile
        self.window: tuple[float, float] | None = None
        if profile is True:
            self.profile()

    @functools.cached_property
    def recorded_run(self) -> RunResult | None:
        """The interpreter run whose log shows the kernel's manual DMAs and semaphores (TPU
        interpret mode; on the workbench's N devices), or its TMA copies and barriers (Mosaic
        GPU interpret mode), as they happened: the comparison's, else one made now."""
        k = self.ctx.kernel
        if not (k.dmas or k.semaphore_ops) or self.ctx.capture is None:
            return None
        mode = "gpu" if k.backend == "mosaic_gpu" else "tpu"
        executor = executor_of_mode(mode)  # the interpreter that records DMAs or TMA copies
        s = self.ctx.session
        comparison = s.comparison if s is not None else None
        if comparison is not None and executor in comparison.executors:
            ran = comparison.result(executor)
            if ran.device_record is not None:
                return ran
        if s is None:
            return None
        if s.device_run is not None and s.device_run.device_record is not None:
            return s.device_run  # the run on N devices the other tabs describe
        from pallaslab.execute import run

        devices = self.ctx.options.get("devices") if mode == "tpu" else None
        if devices and (call := s.traceable_call()) is not None:
            return run(call[0], *call[1], executor=executor, devices=int(devices), **call[2])
        handle = self.ctx.capture.handle
        # Mosaic GPU interpret mode re-traces the user's own function (the captured jaxpr
        # has the kernel bound for the GPU): the traced one, when the capture kept it.
        fn, args, kwargs = (handle.fn, handle.args, dict(handle.kwargs)) \
            if s.call is None and getattr(handle, "fn", None) is not None else s.call_args()
        return run(fn, *args, executor=executor, **kwargs)

    @property
    def recorded(self) -> tuple[RunRecord | None, str | None]:
        """(the kernel's part of the run's record, why there is none)."""
        ran = self.recorded_run
        if ran is None:
            return None, None
        record = ran.device_record
        recorded = None if record is None else run_record(self.ctx.kernel, record,
                                                          ran.executor)
        if ran.status == "ran" and recorded is not None:
            return recorded, None
        why = ran.unavailable or ran.error or ran.reason or "the run kept no record"
        if recorded is None or not recorded["ops"]:
            return None, f"no recorded run: {ran.executor} {ran.status}: {why}"
        return recorded, f"the recorded run stopped early: {ran.executor} {ran.status}: {why}"

    @functools.cached_property
    def model(self) -> Pipeline:
        return pipeline(self.ctx.kernel, self.chip, tiling=self.ctx.tiling)

    @property
    def tiling(self) -> Tiling:
        assert self.ctx.tiling is not None  # the tab is only available with a tiling
        return self.ctx.tiling

    def profile(self, *, runs: int = 1, interpret: bool | None = None) -> PipelineView:
        """Run the kernel under `jax.profiler` (interpreted on a CPU) and show the measured
        timeline beside the model; updates the live widget."""
        from pallaslab.execute.profile import profile

        self.measured = profile(self.ctx.kernel, runs=runs, interpret=interpret)
        self._push()
        return self

    @property
    def chips(self) -> list[str]:
        """The chips the live widget offers: the workbench's (or v5e, v6e) and this one."""
        names = [get_chip(c).name for c in (self.ctx.chips or DEFAULT_CHIPS)]
        return names if self.chip in names else [self.chip, *names]

    def select(self, chip: str) -> PipelineView:
        """Model another chip; updates the live widget."""
        name = get_chip(chip).name
        if name != self.chip:
            self.chip = name
            self.__dict__.pop("model", None)
            self.window = None
            self._push()
            if "widget" in self.__dict__:  # keep the widget's request in step with Python
                self.widget.selection = {**self.widget.selection, "chip": name}
        return self

    def _payload(self, *, live: bool) -> PipelinePayload:
        # The live widget also gets the exact events of the window it zoomed to.
        k = self.ctx.kernel
        recorded, note = self.recorded
        if is_gpu_kernel(k):  # the GPU time model's facts (no TPU pipeline to draw)
            return visible_payload(PipelinePayload(
                version=PAYLOAD_VERSION, kernel=k.name, index=k.index, chip=self.chip,
                grid=[] if self.ctx.tiling is None else [int(g) for g in self.ctx.tiling.grid],
                programs=k.programs or 0, summary={}, stall_time=None,
                measured=None if self.measured is None else measured_info(self.measured),
                tracks=[], chips=self.chips, live=live, manual=manual_ops(k),
                manual_note=manual_note(k), nested=nested_pipelines(k, self.chip),
                recorded=recorded, recorded_note=note, dma_traffic=dma_traffic(k, recorded),
                published=self.published,
                gpu=GpuPayload(gpus=list(self.gpus), lead=gpu_lead(self.gpu_predictions),
                               facts=[list(f) for f in self.gpu_facts()])))
        if self.ctx.tiling is None:  # a mesh kernel: only its manual DMAs and semaphores
            return visible_payload(PipelinePayload(
                version=PAYLOAD_VERSION, kernel=k.name, index=k.index, chip=self.chip, grid=[],
                programs=0, summary={}, stall_time=None, measured=None, tracks=[],
                chips=self.chips, live=live, manual=manual_ops(k), manual_note=manual_note(k),
                nested=nested_pipelines(k, self.chip), recorded=recorded,
                recorded_note=note, dma_traffic=dma_traffic(k, recorded)))
        payload = pipeline_payload(k.name, k.index, self.tiling.grid, self.model,
                                   self.measured, window=self.window if live else None,
                                   chips=self.chips, live=live)
        payload["manual"] = manual_ops(k)
        payload["manual_note"] = manual_note(k)
        payload["nested"] = nested_pipelines(k, self.chip)
        payload["recorded"] = recorded
        payload["recorded_note"] = note
        payload["dma_traffic"] = dma_traffic(k, recorded)
        payload["published"] = self.published
        # the facts the text and static HTML show, worded once (the widget lists them)
        payload["facts"] = [["steps", f"{self.model.summary.steps:,}"],
                            ["predicted", self.headline()[0][1]],
                            *([a, b] for a, b in self.facts())]
        return visible_payload(payload)

    def _on_selection(self, change: Mapping[str, Any]) -> None:
        """The widget asks for another chip (`selection.chip`) or for the events of the window
        it zoomed to (`selection.window`, fractions of the timeline)."""
        sel = change["new"] or {}
        chip = sel.get("chip")
        if chip and get_chip(chip).name != self.chip:
            self.select(chip)
            return
        win = sel.get("window")
        if not win or len(win) != 2:
            return
        f0, f1 = max(0.0, float(win[0])), min(1.0, float(win[1]))
        if f1 > f0 and (f0, f1) != self.window:
            self.window = (f0, f1)
            self._push()

    # --- static forms -------------------------------------------------------------------

    def facts(self) -> list[tuple[str, str]]:
        """(fact, value) under the lead line: the headline after the predicted time, the
        longest stall, flops, the measured run and published timings."""
        s = self.model.summary
        stall = "none" if s.stall_step is None else \
            f"step {s.stall_step} (program {self.tiling.program_at(s.stall_step)})"
        head = self.headline()
        facts = [*head[1:3], ("longest stall", stall), *head[3:], ("flops", f"{s.flops:,.0f}")]
        if self.measured is not None:
            facts.append(measured_fact(self.measured))
        return facts + [("published", line.removeprefix("published ")) for line in self.published]

    def headline(self) -> list[tuple[str, str]]:
        """(fact, value) of the model's headline: predicted, compute, exposed copy time, then
        traffic. A kernel that moves its own data gets what its DMAs move, and no share or
        exposed time the model cannot know (it times BlockSpec copies only)."""
        s = self.model.summary
        compute = format_time(s.compute_time)
        predicted = ("predicted time", format_time(s.predicted_time))
        moved = dma_traffic(self.ctx.kernel, self.recorded[0])
        nested = nested_totals(self.ctx.kernel, self.chip)
        if moved is None and nested is not None:
            return with_nested(s, nested)
        if moved is None:
            return [predicted,
                    ("compute", f"{compute} ({100 * s.compute_bound_fraction:.0f}% "
                                "compute-bound)"),
                    ("exposed copy time", format_time(s.exposed_copy_time)),
                    ("HBM traffic", f"{_html.num(s.hbm_bytes)} B")]
        blockspecs = [("HBM traffic", f"{_html.num(s.hbm_bytes)} B through BlockSpecs")] \
            if s.hbm_bytes else []
        return [predicted, ("compute", f"{compute} (share not estimated)"),
                ("exposed copy time", moved["exposed"]),
                ("moved by its DMAs", moved["text"]), *blockspecs]

    @property
    def published(self) -> list[str]:
        """Published timings of this kernel's op and shapes, when the table is set (on the
        targeted GPUs first for a GPU kernel)."""
        if is_gpu_kernel(self.ctx.kernel):
            return published_gpu_lines(self.ctx.kernel, self.gpus)
        return published_lines(self.ctx.kernel, self.chip)

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPUs a GPU kernel's time is predicted on: the `gpu-*` targets, else H100."""
        return target_gpus(self.ctx.targets)

    @functools.cached_property
    def gpu_predictions(self) -> list[GpuPrediction]:
        return predictions(self.ctx.kernel, self.gpus)

    def gpu_facts(self) -> list[tuple[str, str]]:
        """A GPU kernel's facts: the model per GPU, the measured run, the published times."""
        facts = gpu_facts(self.ctx.kernel, self.gpu_predictions)
        if (moved := dma_traffic(self.ctx.kernel, self.recorded[0])) is not None:
            facts.append(("moved by its DMAs", moved["text"]))
        if self.measured is not None:
            facts.append(measured_fact(self.measured))
        return facts + [("published", line.removeprefix("published ")) for line in self.published]

    def tree(self) -> Section:
        """The pipeline as one tree (`pipeline_tree`): what the text and HTML render."""
        k = self.ctx.kernel
        recorded, note = self.recorded
        if is_gpu_kernel(k):
            return pipeline_tree(
                ("Pipeline of kernel ", f"{k.index} ", Code(k.name),
                 f" on GPU {', '.join(g.upper() for g in self.gpus)} (model)"),
                gpu_lead(self.gpu_predictions), self.gpu_facts(), self._measured_svgs(),
                manual_parts(k, self.chip), recorded, note)
        if self.ctx.tiling is None:  # a mesh kernel: only its manual DMAs and semaphores
            moved = dma_traffic(k, recorded)
            return pipeline_tree(
                ("Pipeline of kernel ", f"{k.index} ", Code(k.name),
                 ": no BlockSpec pipeline (manual DMAs only)"), None,
                [] if moved is None else [("moved by its DMAs", moved["text"])], [],
                manual_parts(k, self.chip), recorded, note)
        s = self.model.summary
        svgs = [static_timeline(f"model · TPU {self.chip}", self.model.events,
                                s.predicted_time, COMPUTE), *self._measured_svgs()]
        return pipeline_tree(
            ("Pipeline of kernel ", f"{k.index} ", Code(k.name), f" on TPU {self.chip} (model)"),
            f"{s.steps:,} steps, predicted {self.headline()[0][1]}", self.facts(), svgs,
            manual_parts(k, self.chip), recorded, note)

    def _measured_svgs(self) -> list[str]:
        if self.measured is None:
            return []
        m = self.measured
        dur = float(m.events.end.max()) if len(m.events) else 0.0
        return [static_timeline(f"measured · {m.device}", m.events, dur, PROFILE_STEP_KIND)]

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        k = self.ctx.kernel
        where = (f"GPU {', '.join(g.upper() for g in self.gpus)}, model" if is_gpu_kernel(k)
                 else "no BlockSpec pipeline" if self.ctx.tiling is None
                 else f"TPU {self.chip}, model")
        head = (f'<h3 class="pl-title">Pipeline <code>{esc(k.name)}</code> '
                f'<span class="pl-dim">{esc(where)}</span></h3>')
        body = "".join(to_html(part) for part in self.tree().children)
        return f'<div class="pl-pipeline-static">{head}{body}</div>'


LANE_H = 14
LABEL_W = 150
SVG_W = 640


def static_timeline(title: str, events: Events, duration: float, step_kind: int,
                    columns: int = STATIC_BINS) -> str:
    """An inline SVG summary: per lane, `columns` time bins shaded by how busy the lane is."""
    duration = duration or 1.0
    busy = lane_busy(events, columns, duration) if len(events) else np.zeros(
        (len(events.lanes), columns))
    steps = step_at(events, step_kind, np.linspace(0, duration, columns + 1)) if len(events) \
        else np.full(columns + 1, -1)
    cw = (SVG_W - LABEL_W) / columns
    parts = []
    for lane, name in enumerate(events.lanes):
        y = lane * (LANE_H + 3)
        parts.append(f'<text x="0" y="{y + LANE_H - 3}" class="pl-svg-label">{esc(name)}</text>')
        shade = np.round(busy[lane], 2)
        for a, b in _runs(shade):  # one rect per run of equally busy columns
            t0, t1 = duration * a / columns, duration * b / columns
            tip = (f"{name}: {format_time(t0)}–{format_time(t1)}, {100 * shade[a]:.0f}% busy, "
                   f"steps {max(steps[a], 0)}–{max(steps[b], 0)}")
            parts.append(f'<rect x="{LABEL_W + a * cw:.2f}" y="{y}" '
                         f'width="{(b - a) * cw + 0.3:.2f}" height="{LANE_H}" '
                         f'class="pl-svg-lane{lane % 3}" '
                         f'fill-opacity="{0.25 + 0.75 * shade[a]:.2f}">'
                         f"<title>{esc(tip)}</title></rect>")
    height = len(events.lanes) * (LANE_H + 3) + 14
    parts.append(f'<text x="{LABEL_W}" y="{height - 2}" class="pl-svg-label">0</text>'
                 f'<text x="{SVG_W}" y="{height - 2}" text-anchor="end" '
                 f'class="pl-svg-label">{esc(format_time(duration))}</text>')
    return (f'<figure class="pl-timeline-static"><svg width="{SVG_W}" height="{height}" '
            f'role="img" aria-label="{esc(title)}">{"".join(parts)}</svg>'
            f"<figcaption>{esc(title)}</figcaption></figure>")


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """[a, b) column ranges of equal, non-zero values."""
    if not len(values):
        return []
    cuts = np.flatnonzero(np.diff(values)) + 1
    bounds = np.concatenate([[0], cuts, [len(values)]])
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if values[a] > 0]


def _available(ctx: KernelContext) -> bool:
    # The model is the TPU's software pipeline: not shown when only GPU targets were asked for.
    gpu_only = bool(ctx.targets) and all(t.startswith("gpu-") for t in ctx.targets)
    k = ctx.kernel
    manual = bool(k.dmas or k.semaphore_ops or k.pipelines)
    mesh = k.mesh is not None and k.kind == "mesh" and k.backend != "triton" and manual
    # A Mosaic GPU kernel's TMA copies and barriers are listed whatever the targets.
    # A Triton or Mosaic GPU kernel: the GPU time model's prediction, whatever the targets.
    return (k.kind == "pallas_call" and applies(k) and ctx.tiling is not None
            and not gpu_only) or (mesh and (not gpu_only or k.backend == "mosaic_gpu")) \
        or (is_gpu_kernel(k) and k.kind in ("pallas_call", "mesh"))


register_tab("pipeline", order=50, title="Pipeline", available=_available, build=PipelineView)

"""The Pipeline view's payload: what the widget, the offline report and the tests share.

Events cross the wire as binary columns (lane, kind: uint8; start, end: float64; program:
int32), sorted by lane then start. A timeline of more than `MAX_EVENTS` events is sent as
per-lane busy fractions in `BINS` time bins plus the events of one window; `pipeline_payload`
is the pure function that builds it from a model (and a measured profile).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from pallaslab.analysis.pipeline import COMPUTE, Events, Pipeline, binned_overlap
from pallaslab.views._html import visible_payload
from pallaslab.views.pipeline_manual import (
    DmaTraffic,
    ManualOp,
    NestedPipeline,
    format_time,
)
from pallaslab.views.pipeline_record import RunRecord

if TYPE_CHECKING:
    from pallaslab.execute.profile import ProfileTimeline

PAYLOAD_VERSION = 1
MAX_EVENTS = 20_000  # events sent in full up to this many; beyond, bins + a window of events
WINDOW_EVENTS = 4_000  # events of the window sent with the bins
BINS = 2_048  # time bins of an aggregated timeline
STATIC_BINS = 160  # columns of the static SVG timeline
PROFILE_STEP_KIND = 1  # pallaslab.execute.profile.STEP (kept here: no jax import to draw)


class TrackPayload(TypedDict):
    name: str  # what the track header shows
    source: str  # "model" | "profile"
    lanes: list[str]
    kinds: list[str]
    duration: float  # seconds, the end of the last event
    count: int  # events in the whole timeline
    step_kind: int  # the kind whose events are the grid steps (compute / step)
    window: list[float]  # [t0, t1]: every event overlapping it is in the columns below
    lane_offsets: list[int]  # the events of lane l are rows lane_offsets[l]:lane_offsets[l+1]
    max_duration: list[float]  # per lane, the longest event sent (for searching by time)
    lane: memoryview  # uint8
    kind: memoryview  # uint8
    start: memoryview  # float64, seconds
    end: memoryview  # float64
    program: memoryview  # int32: the grid step, -1 when unknown
    bins: int  # 0: every event is sent
    busy: memoryview | None  # float32 (lanes, bins): busy fraction of each bin, 0..1
    bin_step: memoryview | None  # int32 (bins,): the step running at each bin's start, -1


class GpuPayload(TypedDict):
    gpus: list[str]
    lead: str
    facts: list[list[str]]  # [fact, value]: predictions, measured, published


class PipelinePayload(TypedDict):
    version: int
    kernel: str
    index: int
    chip: str
    grid: list[int]
    programs: int
    summary: dict[str, Any]  # PipelineSummary.to_json()
    stall_time: float | None  # compute start of the step that waits longest
    measured: dict[str, Any] | None  # device, total_time, steps, mean_step
    tracks: list[TrackPayload]
    chips: list[str]  # chips the live widget offers (it sets `selection.chip`)
    live: bool  # False in the offline report: no Python to ask for windows or chips
    # Beyond BlockSpecs: manual DMAs and semaphore operations in program order, what a static
    # model cannot know about them, and the pipeline model of each nested emit_pipeline.
    manual: list[ManualOp]
    manual_note: str | None
    nested: list[NestedPipeline]
    # What a tpu-interpret run logged of those DMAs and semaphores, in order (None: no run).
    recorded: RunRecord | None
    recorded_note: str | None  # why there is no record
    # What a kernel that moves its own data moves (the headline, in place of the BlockSpec
    # model's HBM traffic and compute-bound share); None without manual DMAs.
    dma_traffic: NotRequired[DmaTraffic | None]
    # Published device timings of this kernel's op and shapes ($PALLASLAB_PUBLISHED_TIMINGS).
    published: NotRequired[list[str]]
    # The BlockSpec pipeline's facts as the text words them: steps, predicted, then `facts()`.
    facts: NotRequired[list[list[str]]]
    # A GPU kernel: the GPU time model's lead line and (fact, value) pairs, as the text shows.
    gpu: NotRequired[GpuPayload | None]



def pipeline_payload(
    kernel_name: str, index: int, grid: Sequence[int], model: Pipeline,
    measured: ProfileTimeline | None = None, *, window: tuple[float, float] | None = None,
    max_events: int = MAX_EVENTS, bins: int = BINS, chips: Sequence[str] = (),
    live: bool = False,
) -> PipelinePayload:
    """Everything the Pipeline widget draws (pure). `window` is a fraction [f0, f1] of each
    track's duration whose events to send when a track is too long to send whole."""
    s = model.summary
    stall = None if s.stall_step is None else float(model.compute_start[s.stall_step])
    tracks = [track(f"model · TPU {model.chip}", "model", model.events, COMPUTE,
                    s.predicted_time, window=window, max_events=max_events, bins=bins)]
    info = None
    if measured is not None:
        ev = measured.events
        dur = float(ev.end.max()) if len(ev) else 0.0
        tracks.append(track(f"measured · {measured.device}", "profile", ev, PROFILE_STEP_KIND,
                            dur, window=window, max_events=max_events, bins=bins))
        info = measured_info(measured)
    return visible_payload(PipelinePayload(
        version=PAYLOAD_VERSION, kernel=kernel_name, index=index, chip=model.chip,
        grid=[int(g) for g in grid], programs=s.steps, summary=s.to_json(), stall_time=stall,
        measured=info, tracks=tracks, chips=list(chips) or [model.chip], live=live,
        manual=[], manual_note=None, nested=[], recorded=None, recorded_note=None))


def measured_info(measured: ProfileTimeline) -> dict[str, Any]:
    """What the payload says of a profiled run: device, total time, steps, mean step."""
    steps = measured.step_durations()
    return {"device": measured.device, "total_time": measured.total_time,
            "steps": measured.steps, "mean_step": float(steps.mean()) if len(steps) else None}


def measured_fact(measured: ProfileTimeline) -> tuple[str, str]:
    """The measured run as a (fact, value) beside the model's."""
    info = measured_info(measured)
    mean = f", mean step {format_time(info['mean_step'])}" if info["mean_step"] is not None \
        else ""
    return ("measured", f"{info['device']}: {format_time(info['total_time'])}, "
                        f"{info['steps']:,} steps{mean}")


def track(name: str, source: str, events: Events, step_kind: int, duration: float, *,
          window: tuple[float, float] | None = None, max_events: int = MAX_EVENTS,
          bins: int = BINS) -> TrackPayload:
    """One timeline: all its events, or (too many) busy bins plus the events of a window."""
    n = len(events)
    duration = float(duration) or float(events.end.max(initial=0.0)) or 1.0
    if n <= max_events:
        sel = np.arange(n)
        win = [0.0, duration]
        nbins = 0
    else:
        # no window asked for: the first steps (the prologue, where pipelines stall)
        f0, f1 = window if window is not None else (0.0, 1.0)
        t0, t1 = f0 * duration, f1 * duration
        sel, win = window_rows(events, t0, t1, WINDOW_EVENTS if window is None else max_events)
        nbins = bins
    lane = events.lane[sel].astype(np.uint8)
    order = np.lexsort((events.start[sel], lane))
    sel, lane = sel[order], lane[order]
    nlanes = len(events.lanes)
    offsets = np.searchsorted(lane, np.arange(nlanes + 1), side="left")
    dur = events.end[sel] - events.start[sel]
    longest = [float(dur[offsets[i]:offsets[i + 1]].max(initial=0.0)) for i in range(nlanes)]
    busy = bin_step = None
    if nbins:
        busy = memoryview(np.ascontiguousarray(lane_busy(events, nbins, duration), "<f4"))
        bin_step = memoryview(step_at(events, step_kind, np.linspace(0, duration, nbins + 1)
                                      [:-1]).astype("<i4"))
    return TrackPayload(
        name=name, source=source, lanes=list(events.lanes), kinds=list(events.kinds),
        duration=duration, count=n, step_kind=step_kind, window=win,
        lane_offsets=[int(o) for o in offsets], max_duration=longest,
        lane=memoryview(np.ascontiguousarray(lane)),
        kind=memoryview(np.ascontiguousarray(events.kind[sel].astype(np.uint8))),
        start=memoryview(np.ascontiguousarray(events.start[sel], "<f8")),
        end=memoryview(np.ascontiguousarray(events.end[sel], "<f8")),
        program=memoryview(np.ascontiguousarray(events.program[sel], "<i4")),
        bins=nbins, busy=busy, bin_step=bin_step)


def window_rows(events: Events, t0: float, t1: float, cap: int) -> tuple[np.ndarray, list[float]]:
    """Rows of the events overlapping [t0, t1], at most `cap` of them (the earliest starting);
    returns the rows and the window [t0, t1') they cover completely (every event overlapping
    it is among the rows)."""
    rows = np.flatnonzero((events.end >= t0) & (events.start <= t1))
    if len(rows) <= cap:
        return rows, [float(t0), float(t1)]
    by_start = rows[np.argsort(events.start[rows], kind="stable")]
    cut = float(events.start[by_start[cap]])
    kept = by_start[:cap]
    return kept[events.start[kept] < cut], [float(t0), cut]


def lane_busy(events: Events, bins: int, duration: float) -> np.ndarray:
    """(lanes, bins) busy fraction of every lane in equal time bins over [0, duration]."""
    edges = np.linspace(0.0, duration, bins + 1)
    width = duration / bins
    out = np.zeros((len(events.lanes), bins))
    for lane in range(len(events.lanes)):
        sel = events.lane == lane
        if sel.any():
            out[lane] = binned_overlap(events.start[sel], events.end[sel], edges) / width
    return np.clip(out, 0.0, 1.0)


def step_at(events: Events, step_kind: int, times: np.ndarray) -> np.ndarray:
    """The step whose step-kind event (compute / profiled step) is running, or last started,
    at each time (before the first: the first step, whose copies are running); -1 if none."""
    sel = events.kind == step_kind
    if not sel.any():
        return np.full(len(times), -1, np.int64)
    starts, programs = events.start[sel], events.program[sel]
    order = np.argsort(starts, kind="stable")
    starts, programs = starts[order], programs[order]
    at = np.searchsorted(starts, times, side="right") - 1
    return programs[np.maximum(at, 0)]


# --- the view ---------------------------------------------------------------------------------

"""A model of the TPU software pipeline over a kernel's grid: when each copy and compute runs.

Pallas on TPU runs the grid as a software pipeline. At step t it waits for step t's input
blocks, starts copying step t+1's input blocks into the other buffer slot (skipped when the
block index does not change: a revisit), computes, and starts writing the output block back
to HBM when the next step moves to another output block. Before computing into an output
slot it waits for that slot's previous write-back. With one buffer (`pl.Buffered(1)`, or a
constant index map) a copy cannot overlap the compute that uses the slot.

With A_t the time compute of step t starts, c_t its duration, i_t the input-copy time of
step t, o_t the write-back time after step t:

    A_0     = i_0
    A_{t+1} = max(A_t + c_t,                      # compute is sequential
                  A_t + s_t + i_{t+1},            # prefetch issued at A_t (s_t = c_t when a
                                                  #   single-buffered input must wait)
                  A_t + c_t + o1_t,               # single-buffered output: wait write-back
                  A_{t-1} + c_{t-1} + o2_{t-1})   # double-buffered output: the slot's last one

a max-plus linear recurrence, solved for every step at once by a parallel prefix scan of
2x2 max-plus matrices (a million steps in well under a second with numpy).

Durations: bytes / the chip's HBM bandwidth; dot flops / the MXU peak (bf16, or int8 for
8-bit inputs), plus elementwise ops / the VPU's rate, plus a fixed per-step overhead. Chip
facts from JAX's own tables, via `chips.py`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from pallaslab.analysis.chips import Chip
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.cost import StepCost, step_cost
from pallaslab.analysis.occupancy import occupancy
from pallaslab.analysis.tiling import Tiling, tile, tiling_unavailable_reason
from pallaslab.errors import PallasLabError
from pallaslab.model import Kernel

# Pallas's TPU guide: each grid step costs a fixed ~0.35 us of pipeline bookkeeping.
STEP_OVERHEAD = 0.35e-6

LANES = ("copy-in", "compute", "write-back")
KINDS = ("copy-in", "compute", "write-back")
COPY_IN, COMPUTE, WRITE_BACK = 0, 1, 2


class PipelineError(PallasLabError, ValueError):
    """The pipeline of a kernel cannot be modelled (e.g. its tiling is unknown)."""


@dataclasses.dataclass(frozen=True, eq=False)
class Events:
    """Timeline events as numpy columns (one row per event): the format shared by the
    pipeline model and measured profiles. Times in seconds from the first event."""

    lane: np.ndarray  # int16: index into `lanes`
    start: np.ndarray  # float64
    end: np.ndarray  # float64
    kind: np.ndarray  # int16: index into `kinds`
    program: np.ndarray  # int64: grid step in execution order, -1 when unknown
    lanes: tuple[str, ...]
    kinds: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.start)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def columns(self) -> dict[str, np.ndarray]:
        """Binary-friendly columns for widget payloads."""
        return {"lane": self.lane, "start": self.start, "end": self.end,
                "kind": self.kind, "program": self.program}

    def select(self, mask: np.ndarray) -> Events:
        return dataclasses.replace(self, lane=self.lane[mask], start=self.start[mask],
                                   end=self.end[mask], kind=self.kind[mask],
                                   program=self.program[mask])


@dataclasses.dataclass(frozen=True)
class PipelineSummary:
    steps: int
    predicted_time: float  # seconds, first copy to last write-back
    compute_time: float  # sum of compute durations
    compute_bound_fraction: float  # compute_time / predicted_time
    exposed_copy_time: float  # time compute is idle waiting for copies
    stall_step: int | None  # the step whose compute waits longest for its copies
    first_stall_step: int | None  # the first step (after the prologue) that waits at all
    hbm_bytes: int
    flops: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    kernel: str
    chip: str
    events: Events
    summary: PipelineSummary
    compute_start: np.ndarray = dataclasses.field(repr=False, compare=False)

    def aggregate(self, bins: int = 512) -> dict[str, np.ndarray]:
        """Busy seconds per lane in `bins` equal time bins (for drawing million-step grids)."""
        edges = np.linspace(0.0, self.summary.predicted_time or 1.0, bins + 1)
        busy = np.zeros((len(LANES), bins))
        ev = self.events
        for lane in range(len(LANES)):
            sel = ev.lane == lane
            busy[lane] = binned_overlap(ev.start[sel], ev.end[sel], edges)
        return {"edges": edges, "busy": busy}


def binned_overlap(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Total overlap of intervals with each bin, vectorized via cumulative coverage."""
    def covered(x: np.ndarray) -> np.ndarray:  # total interval length below each x
        s = np.sort(start)
        e = np.sort(end)
        cs = np.concatenate([[0.0], np.cumsum(s)])
        ce = np.concatenate([[0.0], np.cumsum(e)])
        ns = np.searchsorted(s, x, side="right")
        ne = np.searchsorted(e, x, side="right")
        return (ns * x - cs[ns]) - (ne * x - ce[ne])

    total = covered(edges)
    return np.diff(total)


# --- the numeric core ------------------------------------------------------------------------


def simulate(
    copy_in: np.ndarray,
    compute: np.ndarray,
    write_back: np.ndarray,
    *,
    serial_in: np.ndarray | None = None,
    serial_out: np.ndarray | None = None,
    hbm_bytes: int = 0,
    flops: float = 0.0,
) -> tuple[Events, PipelineSummary, np.ndarray]:
    """Run the pipeline recurrence over per-step durations (seconds).

    `copy_in[t]`: input copies needed before step t; `write_back[t]`: output copies after
    step t; `serial_in[t]` / `serial_out[t]`: those copies use a single-buffered slot.
    """
    i = np.asarray(copy_in, np.float64)
    c = np.asarray(compute, np.float64)
    o = np.asarray(write_back, np.float64)
    steps = len(c)
    if not (len(i) == len(o) == steps):
        raise PipelineError(f"need equal per-step arrays; got {len(i)}, {steps}, {len(o)}")
    if steps == 0:  # a grid with no programs: nothing runs, nothing is copied
        return _events(i, i, i, c, o), PipelineSummary(
            steps=0, predicted_time=0.0, compute_time=0.0, compute_bound_fraction=1.0,
            exposed_copy_time=0.0, stall_step=None, first_stall_step=None,
            hbm_bytes=int(hbm_bytes), flops=float(flops)), np.zeros(0)
    sin = np.zeros(steps, bool) if serial_in is None else np.asarray(serial_in, bool)
    sout = np.zeros(steps, bool) if serial_out is None else np.asarray(serial_out, bool)
    o1 = np.where(sout, o, 0.0)
    o2 = np.where(sout, 0.0, o)
    start = _compute_starts(i, c, o1, o2, sin)
    finish = start + c
    prefetch_at = np.empty(steps)
    prefetch_at[0] = 0.0
    prefetch_at[1:] = start[:-1] + np.where(sin[1:], c[:-1], 0.0)
    events = _events(prefetch_at, i, start, c, o)
    total = float(np.max(finish + o))
    waits = np.empty(steps)
    waits[0] = start[0]
    waits[1:] = start[1:] - finish[:-1]
    eps = 1e-12 * max(total, 1e-30)
    stalls = np.flatnonzero(waits[1:] > eps) + 1
    summary = PipelineSummary(
        steps=steps,
        predicted_time=total,
        compute_time=float(c.sum()),
        compute_bound_fraction=float(c.sum() / total) if total > 0 else 1.0,
        exposed_copy_time=float(total - c.sum()),
        stall_step=int(np.argmax(waits[1:]) + 1) if len(stalls) else None,
        first_stall_step=int(stalls[0]) if len(stalls) else None,
        hbm_bytes=int(hbm_bytes),
        flops=float(flops),
    )
    return events, summary, start


def _compute_starts(i: np.ndarray, c: np.ndarray, o1: np.ndarray, o2: np.ndarray,
                    sin: np.ndarray) -> np.ndarray:
    """A_t for every step: x_{t+1} = M_t (x) x_t over max-plus, x_t = (A_t, A_{t-1})."""
    steps = len(c)
    start = np.empty(steps)
    start[0] = i[0]
    if steps == 1:
        return start
    neg = -np.inf
    # M_t for t = 0 .. steps-2 as four arrays (row-major 2x2).
    m = np.maximum.reduce([c[:-1], np.where(sin[1:], c[:-1], 0.0) + i[1:], c[:-1] + o1[:-1]])
    n = np.full(steps - 1, neg)
    n[1:] = c[:-2] + o2[:-2]
    a, b = m, n  # fresh arrays: updated in place below
    cc = np.zeros(steps - 1)
    d = np.full(steps - 1, neg)
    shift = 1
    while shift < steps - 1:  # Hillis-Steele inclusive scan: Q_t = M_t (x) Q_{t-shift}
        a2, b2, c2, d2 = a[:-shift], b[:-shift], cc[:-shift], d[:-shift]
        ah, bh, ch, dh = a[shift:], b[shift:], cc[shift:], d[shift:]
        na = np.maximum(ah + a2, bh + c2)
        nb = np.maximum(ah + b2, bh + d2)
        nc = np.maximum(ch + a2, dh + c2)
        d[shift:] = np.maximum(ch + b2, dh + d2)  # every read above is done: update in place
        a[shift:], b[shift:], cc[shift:] = na, nb, nc
        shift *= 2
    start[1:] = a + i[0]  # x_0 = (i_0, -inf)
    return start


def _events(prefetch_at: np.ndarray, i: np.ndarray, start: np.ndarray, c: np.ndarray,
            o: np.ndarray) -> Events:
    steps = np.arange(len(c), dtype=np.int64)
    fin = np.flatnonzero(i > 0)
    wb = np.flatnonzero(o > 0)
    starts = np.concatenate([prefetch_at[fin], start, start[wb] + c[wb]])
    ends = np.concatenate([prefetch_at[fin] + i[fin], start + c, start[wb] + c[wb] + o[wb]])
    kind = np.concatenate([np.full(len(fin), COPY_IN, np.int16),
                           np.full(len(c), COMPUTE, np.int16),
                           np.full(len(wb), WRITE_BACK, np.int16)])
    program = np.concatenate([steps[fin], steps, steps[wb]])
    return Events(lane=kind.copy(), start=starts, end=ends, kind=kind, program=program,
                  lanes=LANES, kinds=KINDS)


# --- from a kernel ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class StepTimes:
    """Per-step durations and bytes derived from the tiling table and the kernel's cost."""

    copy_in: np.ndarray
    compute: np.ndarray
    write_back: np.ndarray
    serial_in: np.ndarray
    serial_out: np.ndarray
    hbm_bytes: int
    flops: float


def step_times(kernel: Kernel, chip: Chip, tiling: Tiling, cost: StepCost,
               step_overhead: float = STEP_OVERHEAD) -> StepTimes:
    steps = tiling.programs
    occ = occupancy(kernel, chip)
    in_bytes = np.zeros(steps)
    out_bytes = np.zeros(steps)
    serial_in = np.zeros(steps, bool)
    serial_out = np.zeros(steps, bool)
    for origin, ot in tiling.operands.items():
        if not ot.windowed:
            continue
        single = occ.operand(origin).buffers <= 1 and steps > 1
        if ot.role == "input":
            mask = ot.fetch_mask
            in_bytes[mask] += ot.volume_at(mask) * ot.itemsize
            serial_in |= mask & single
        elif ot.role == "output":
            # Written back when the block changes, and after the last step (if any).
            mask = np.append(ot.fetch_mask[1:], True)[:steps]
            out_bytes[mask] += ot.volume_at(mask) * ot.itemsize
            serial_out |= mask & single
    serial_in[:1] = False
    compute = np.full(steps, compute_time(kernel, chip, cost) + step_overhead)
    return StepTimes(
        copy_in=in_bytes / chip.hbm_bandwidth, compute=compute,
        write_back=out_bytes / chip.hbm_bandwidth, serial_in=serial_in, serial_out=serial_out,
        hbm_bytes=int(in_bytes.sum() + out_bytes.sum()), flops=cost.flops * steps,
    )


def compute_time(kernel: Kernel, chip: Chip, cost: StepCost) -> float:
    """One step's compute: its dots on the MXU, then its elementwise work on the VPU. They
    add rather than overlap: within a step the body is a chain of dependent values (softmax
    reads the dot's scores, the next dot reads the softmax's probabilities) and Mosaic
    emits the body as straight-line code, not software-pipelined across loop iterations."""
    vector = cost.vector_ops / chip.vpu_ops if chip.vpu_ops else 0.0
    return cost.mxu_flops * cost.mxu_padding / kernel_peak(kernel, chip) + vector


def kernel_peak(kernel: Kernel, chip: Chip) -> float:
    """The chip's peak ops/s for the kernel's inputs (int8 rate for 8-bit inputs)."""
    eight_bit = any(np.dtype(op.dtype).itemsize == 1 for op in kernel.inputs)
    return chip.peak_flops(np.dtype(np.int8) if eight_bit else None)


def _split_steps(kernel: Kernel, chip: Chip, steps: int) -> int:
    sem = kernel.dimension_semantics
    grid = kernel.grid
    if chip.cores <= 1 or not sem or sem[0] != "parallel" or not grid or not grid[0]:
        return steps
    lead = int(grid[0])
    if lead < chip.cores:
        return steps
    return math.ceil(lead / chip.cores) * (steps // lead)


def pipeline(
    kernel: Kernel,
    chip: str | Chip = "v5e",
    *,
    tiling: Tiling | None = None,
    cost: StepCost | None = None,
    step_overhead: float = STEP_OVERHEAD,
) -> Pipeline:
    """Predict the TPU pipeline timeline of `kernel` on `chip`."""
    c = chip if isinstance(chip, Chip) else get_chip(chip)
    t = tiling if tiling is not None else tile(kernel)
    if t is None:
        raise PipelineError(f"{kernel.name}: cannot model its pipeline: "
                            f"{tiling_unavailable_reason(kernel)}")
    times = step_times(kernel, c, t,
                       cost if cost is not None else step_cost(kernel, c.mxu_size),
                       step_overhead)
    # On a megacore device each TensorCore runs its share of the leading parallel dimension
    # at the same time: the time is that of one core's steps.
    n = _split_steps(kernel, c, t.programs)
    events, summary, start = simulate(
        times.copy_in[:n], times.compute[:n], times.write_back[:n],
        serial_in=times.serial_in[:n], serial_out=times.serial_out[:n],
        hbm_bytes=times.hbm_bytes, flops=times.flops)
    return Pipeline(kernel=kernel.name, chip=c.name, events=events, summary=summary,
                    compute_start=start)


def predicted_time(kernel: Kernel, chip: str | Chip = "v5e") -> float:
    try:
        return pipeline(kernel, chip).summary.predicted_time
    except PipelineError:
        return math.nan


def roofline_time(kernel: Kernel, chip: str | Chip = "v5e",
                  step_overhead: float = STEP_OVERHEAD) -> float:
    """A kernel whose pipeline cannot be tiled (a mesh kernel moving its own data): its MXU
    time or the time to move each HBM operand once, whichever is longer, plus one step's
    overhead per program. A lower bound where copies and compute do not overlap."""
    c = chip if isinstance(chip, Chip) else get_chip(chip)
    cost = step_cost(kernel, c.mxu_size)
    programs = max(1, kernel.programs or 1)
    compute = compute_time(kernel, c, cost) * programs
    moved = sum(math.prod(op.shape) * _itemsize(op.dtype) for op in kernel.operands
                if op.role in ("input", "output")
                and op.memory_space in ("any", "hbm", "default"))
    return max(compute, moved / c.hbm_bandwidth) + programs * step_overhead


def _itemsize(dtype: object) -> int:
    try:
        return int(np.dtype(dtype).itemsize)  # type: ignore[call-overload]
    except TypeError:  # a semaphore or other non-array operand moves no data
        return 0

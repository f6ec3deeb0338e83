"""Profiler timelines: run one captured kernel under `jax.profiler.trace` and read its events.

On a CPU the kernel runs in interpret mode: Pallas lowers the grid to one XLA `while` loop,
so the trace shows the kernel (that loop), each grid step (one loop iteration, in execution
order) and the XLA ops inside each step. On an attached TPU/GPU the kernel runs for real and
its events come from the device planes. Either way the result uses the pipeline model's
event columns (`pallaslab.analysis.pipeline.Events`), so model and measurement line up.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np

from pallaslab.analysis.pipeline import Events
from pallaslab.errors import PallasLabError
from pallaslab.execute.data import random_leaf
from pallaslab.model import Kernel, _jax, capture, select_kernel
from pallaslab.util.tempdir import session_subdir

KINDS = ("kernel", "step", "op")
# XLA:CPU's event for a whole asynchronous execution (seen for long interpreted grids).
_WAIT = "ThunkExecutor::Execute (wait for completion)"
KERNEL, STEP, OP = 0, 1, 2
# JAX allows one profiler trace per process at a time: profiles here take turns.
_TRACE_LOCK = threading.Lock()


class ProfileError(PallasLabError, RuntimeError):
    """The trace did not contain the kernel's events."""


@dataclasses.dataclass(frozen=True)
class ProfileTimeline:
    kernel: str
    device: str  # "cpu (interpret)" or the accelerator's device kind
    events: Events  # kinds: kernel, step (one per grid program), op
    trace_file: str | None

    @property
    def steps(self) -> int:
        return int(np.count_nonzero(self.events.kind == STEP))

    @property
    def total_time(self) -> float:
        sel = self.events.kind == KERNEL
        return float(self.events.duration[sel].sum())

    def step_durations(self) -> np.ndarray:
        sel = self.events.kind == STEP
        order = np.argsort(self.events.program[sel])
        return self.events.duration[sel][order]


def profile(fn: Callable[..., Any] | Kernel, *args: Any, kernel: int | str = 0,
            interpret: bool | None = None, runs: int = 1,
            trace_dir: str | None = None) -> ProfileTimeline:
    """Profile one kernel that `fn(*args)` launches (or a captured `Kernel`).

    `interpret` defaults to True on a CPU-only machine. The kernel runs once to compile
    before the trace, then `runs` times inside it; the last run's events are returned. The
    trace goes to a new folder of its own, under `trace_dir` when given.
    """
    k = fn if isinstance(fn, Kernel) else select_kernel(capture(fn, *args), kernel)
    if interpret is None:
        interpret = jax.default_backend() == "cpu"
    call = _jax.kernel_callable(k, interpret=True) if interpret else _jax.kernel_callable(k)

    def pallaslab_profiled_kernel(*operands: Any) -> list[Any]:
        return call(*operands)

    jitted = jax.jit(pallaslab_profiled_kernel)
    operands = _operands(k)
    jax.block_until_ready(jitted(*operands))
    # Each run traces into a folder of its own (under `trace_dir` when given), so profiles run
    # at the same time (two notebooks sharing a trace_dir) never read each other's trace. The
    # session's traces stay readable for the session and are removed when the process ends.
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
    directory = tempfile.mkdtemp(prefix="profile-", dir=trace_dir or session_subdir("profiles"))
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # Python frames would swamp the kernel's events
    with _TRACE_LOCK, jax.profiler.trace(directory, profiler_options=options):
        for _ in range(max(1, runs)):
            jax.block_until_ready(jitted(*operands))
    files = sorted(glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True),
                   key=os.path.getmtime)
    if not files:
        raise ProfileError(f"{k.name}: jax.profiler.trace wrote no .xplane.pb under {directory}")
    device = "cpu (interpret)" if interpret else jax.devices()[0].device_kind
    events = read_trace(files[-1], kernel_name=k.name, device=not interpret)
    if interpret:
        events = _whole_grid_or_no_steps(events, k.programs)
    if not len(events):
        raise ProfileError(f"{k.name}: the trace {files[-1]} has no events of the kernel")
    return ProfileTimeline(kernel=k.name, device=device, events=events, trace_file=files[-1])


def _whole_grid_or_no_steps(events: Events, programs: int | None) -> Events:
    """The steps read from an interpreted trace when they are the whole grid, else none: under
    load XLA may run some of the loop's iterations on other threads, where they overlap and
    cannot be told apart, and a partial count would pass for the kernel's grid."""
    steps = int(np.count_nonzero(events.kind == STEP))
    if steps == 0 or programs is None or steps == programs:
        return events
    return events.select(events.kind != STEP)


def _operands(k: Kernel) -> list[Any]:
    """Concrete operands: the kernel's own grid bounds and scalar-prefetch values, random data
    for the rest."""
    avals = _jax.kernel_call_avals(k)
    leading: list[Any] = [np.int32(k.grid[d] or 0) for d in k.dynamic_grid_dims]
    leading += [np.asarray(v) for v in k.prefetch_values]
    out = []
    for i, aval in enumerate(avals):
        out.append(leading[i] if i < len(leading) else random_leaf(aval, i))
    return out


# --- reading a trace ---------------------------------------------------------------------


def read_trace(path: str | bytes, *, kernel_name: str | None = None,
               device: bool = False) -> Events:
    """The kernel's events from an xplane.pb file (path) or its serialized bytes."""
    from jax.profiler import ProfileData

    data = (ProfileData.from_serialized_xspace(path) if isinstance(path, bytes)
            else ProfileData.from_file(path))
    if device:
        return _device_events(data.planes, kernel_name)
    return _interpret_events(data.planes)


def _interpret_events(planes: Iterable[Any]) -> Events:
    """Kernel = the longest `while` (or `call`, when XLA compiled the whole grid loop into one
    function; or the whole asynchronous execution) event; steps = the loop's iterations (the
    executor's per-iteration `ThunkExecutor::Execute` regions inside it, when it runs thunk by
    thunk on one thread); ops = HLO ops. When XLA runs the loop asynchronously across threads
    the iterations are not recoverable from the trace: only the kernel and its ops."""
    best: tuple[float, Events] | None = None
    for plane in planes:
        # Event stats are not read: some stat types abort ProfileData's reader. The trace
        # holds one jitted module (the kernel alone), so its longest loop is the kernel. XLA
        # may run loop iterations on other threads: a plane's lines are read as one timeline.
        names: list[str] = []
        starts: list[float] = []
        durs: list[float] = []
        for line in plane.lines:
            if line.name == "python":
                continue
            for ev in line.events:
                names.append(ev.name)
                starts.append(ev.start_ns)
                durs.append(ev.duration_ns)
        if names:
            found = _line_events(0, plane.name, names, np.asarray(starts), np.asarray(durs))
            if found is not None and (best is None or found[0] > best[0]):
                best = found
    return best[1] if best is not None else _empty(())


def _line_events(li: int, line_name: str, names: list[str], start: np.ndarray,
                 dur: np.ndarray) -> tuple[float, Events] | None:
    is_while = np.array([n.startswith(("while", "call")) or n == _WAIT for n in names])
    if not is_while.any():
        return None
    k = int(np.flatnonzero(is_while)[np.argmax(dur[is_while])])
    k_start, k_end = start[k], start[k] + dur[k]
    inside = (start >= k_start) & (start + dur <= k_end) & (np.arange(len(names)) != k)
    is_exec = np.array([n == "ThunkExecutor::Execute" for n in names]) & inside
    if names[k] == _WAIT:  # the loop ran asynchronously: its regions are not iterations
        is_exec[:] = False
    # Iterations: executor regions not nested in an earlier one (nested loops in the body).
    cand = np.flatnonzero(is_exec)
    cand = cand[np.argsort(start[cand], kind="stable")]
    ends = start[cand] + dur[cand]
    reach = np.maximum.accumulate(np.concatenate([[-np.inf], ends[:-1]]))
    steps = cand[start[cand] >= reach]
    ops = np.flatnonzero(inside & ~is_while & ~is_exec
                         & np.array([not n.startswith("end: ") for n in names]))
    step_starts = start[steps]
    op_program = np.searchsorted(step_starts, start[ops], side="right") - 1
    idx = np.concatenate([[k], steps, ops])
    kind = np.concatenate([[KERNEL], np.full(len(steps), STEP), np.full(len(ops), OP)])
    program = np.concatenate([[-1], np.arange(len(steps)), op_program]).astype(np.int64)
    t0 = k_start
    s = (start[idx] - t0) * 1e-9
    return float(dur[k]), Events(
        lane=kind.astype(np.int16), start=s, end=s + dur[idx] * 1e-9,
        kind=kind.astype(np.int16), program=program,
        lanes=(f"{line_name} (kernel)", f"{line_name} (steps)", f"{line_name} (ops)"),
        kinds=KINDS)


def device_event_names(path: str | bytes, limit: int = 20) -> list[tuple[str, int]]:
    """The most frequent event names on the trace's device planes, with their counts: what a
    kernel launch is called there (for a report, and for matching names on new hardware)."""
    from jax.profiler import ProfileData

    data = (ProfileData.from_serialized_xspace(path) if isinstance(path, bytes)
            else ProfileData.from_file(path))
    counts: dict[str, int] = {}
    for plane in data.planes:
        if plane.name.startswith("/device:"):
            for line in plane.lines:
                for ev in line.events:
                    counts[ev.name] = counts.get(ev.name, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]


# Device-plane lines that summarise rather than launch: XLA's per-module and per-op lines
# repeat the kernel's time, and copies are not the kernel.
_SUMMARY_LINES = ("XLA Modules", "XLA Ops", "Steps", "Source code", "XLA TraceMe")
_NOT_KERNELS = ("memcpy", "memset", "Memcpy", "Memset")


def _device_events(planes: Iterable[Any], kernel_name: str | None) -> Events:
    """On TPU/GPU: the device planes' events of the kernel, the first of: launches naming it
    (or Pallas) on the device's own lines; ops naming it on XLA's "XLA Ops" line (a TPU's
    custom call); every launch on the device's own lines but copies (GPU kernels may be
    launched under names of the compiler's own: the profiled computation holds the kernel
    alone). XLA's module line is never read: the jitted wrapper's own name says "pallas"."""
    planes = list(planes)

    def names_it(name: str) -> bool:
        return kernel_name is None or kernel_name in name or \
            ("pallas" in name and "pallaslab_profiled_kernel" not in name)

    for keep in (lambda line, name: not line.startswith(_SUMMARY_LINES) and names_it(name),
                 lambda line, name: line == "XLA Ops" and names_it(name),
                 lambda line, name: not line.startswith(_SUMMARY_LINES) and
                 not any(word in name for word in _NOT_KERNELS)):
        found = _matching_device_events(planes, keep)
        if len(found):
            return found
    return found


def _matching_device_events(planes: Iterable[Any], keep: Callable[[str, str], bool]) -> Events:
    lanes: list[str] = []
    rows: list[tuple[int, float, float]] = []
    for plane in planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            for ev in line.events:
                if keep(line.name, ev.name):
                    label = f"{plane.name} {line.name}"
                    if label not in lanes:
                        lanes.append(label)
                    rows.append((lanes.index(label), ev.start_ns, ev.duration_ns))
    if not rows:
        return _empty(tuple(lanes))
    arr = np.asarray(rows, np.float64)
    s = (arr[:, 1] - arr[:, 1].min()) * 1e-9
    n = len(arr)
    return Events(lane=arr[:, 0].astype(np.int16), start=s, end=s + arr[:, 2] * 1e-9,
                  kind=np.full(n, KERNEL, np.int16), program=np.full(n, -1, np.int64),
                  lanes=tuple(lanes), kinds=KINDS)


def _empty(lanes: tuple[str, ...]) -> Events:
    z = np.zeros(0)
    return Events(lane=z.astype(np.int16), start=z, end=z, kind=z.astype(np.int16),
                  program=z.astype(np.int64), lanes=lanes, kinds=KINDS)

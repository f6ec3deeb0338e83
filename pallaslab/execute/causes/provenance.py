"""Value provenance by line, and reads before the first write.

The kernel's programs are re-run in execution order (HLO interpreter semantics, as the
stepper runs them) by the line recorder (`pallaslab.model._jax.line_record`): each output
element keeps the program and source line of its last store; each load of an output or
scratch block is flagged when it reads an element no program wrote yet. Only the programs up
to the last one that wrote a mismatched block are run, at most `MAX_PROGRAMS` (the messages
say when the run stopped there).

A read before the first write is a cause only when the value it read reaches the wrong
elements: the programs are re-run once more with that operand filled with another value
(`MAX_REFILLS` operands at most), and a read whose value changes none of the wrong elements
(one a `jnp.where` discards, an accumulator set by a select on its first step) is not named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from pallaslab.analysis.tiling import Tiling
from pallaslab.execute.causes.cause import Cause
from pallaslab.execute.causes.text import listed, operand_label
from pallaslab.execute.protocol import Prepared
from pallaslab.model import Kernel, Operand, _jax
from pallaslab.model.source_names import short_source

MAX_PROGRAMS = 1024  # programs re-run to record who wrote what
MAX_LINES_NAMED = 3
MAX_REFILLS = 4  # operands read before written whose reach is found by another re-run


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Per element of one output: the program and source line of its last store."""

    program_of: np.ndarray  # int32, the output's shape: index into `programs`, -1 unwritten
    line_of: np.ndarray  # int32, the output's shape: index into `lines`, -1 none
    programs: tuple[tuple[int, ...], ...]
    lines: tuple[str, ...]  # "file.py:N" / "Cell In[N]:L"
    complete: bool = True  # False: stopped after MAX_PROGRAMS programs

    def to_json(self) -> dict[str, Any]:
        return {"programs": [list(p) for p in self.programs], "lines": list(self.lines),
                "complete": self.complete}


@dataclasses.dataclass(frozen=True)
class FirstRead:
    """A load that read an output or scratch element no program had written yet."""

    operand: Operand
    line: str | None
    program: tuple[int, ...]
    dma: bool = False  # a DMA writes it: the read came before that DMA was waited on
    tracked: int = -1  # its position among the outputs then scratch
    # Per output origin, the elements whose value changes with what the read found (None:
    # not known, the read is named whatever the wrong elements are).
    reaches: dict[str, np.ndarray] | None = dataclasses.field(default=None, repr=False)

    def explains(self, origin: str, wrong: np.ndarray) -> bool:
        """Whether the value read reaches a wrong element of the output `origin`."""
        if self.reaches is None:
            return True
        reach = self.reaches.get(origin)
        return reach is not None and reach.shape == wrong.shape and bool((reach & wrong).any())


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What re-running a kernel's programs recorded."""

    provenance: dict[str, Provenance]  # output origin -> provenance
    first_reads: tuple[FirstRead, ...]
    ran: int  # programs run
    total: int  # programs of the grid
    replay: Any = dataclasses.field(default=None, repr=False, compare=False)  # to re-run

    def causes_for(self, origin: str, wrong: np.ndarray, label: str | None = None
                   ) -> tuple[Cause, ...]:
        """The first-visit causes of this output and of scratch, then the line cause of its
        wrong elements (`label`: how it names the output, the origin by default)."""
        causes = [_first_visit_cause(r) for r in self.first_reads
                  if (r.operand.origin == origin or r.operand.role == "scratch")
                  and r.explains(origin, wrong)]
        line = self._line_cause(origin, wrong, label or origin)
        return tuple([*causes, *([line] if line is not None else [])])

    def _line_cause(self, origin: str, wrong: np.ndarray, label: str) -> Cause | None:
        prov = self.provenance.get(origin)
        if prov is None or prov.line_of.shape != wrong.shape or not wrong.any():
            return None
        lines = prov.line_of[wrong]
        programs = prov.program_of[wrong]
        total = int(wrong.sum())
        unwritten = int((lines < 0).sum())
        ids, counts = np.unique(lines[lines >= 0], return_counts=True)
        order = np.argsort(-counts)
        parts = []
        for k in order[:MAX_LINES_NAMED]:
            line = prov.lines[int(ids[k])]
            progs = np.unique(programs[lines == ids[k]])
            who = [prov.programs[int(p)] for p in progs]
            head = "all" if counts[k] == total else f"{int(counts[k]):,}"
            parts.append(f"{head} last written by {line} in program{'s' if len(who) > 1 else ''}"
                         f" {listed(who)}")
        if unwritten:
            parts.append(f"{unwritten:,} never written by any program")
        if not parts:
            return None
        bounded = "" if prov.complete else (
            f" (only the first {self.ran:,} of {self.total:,} programs were re-run)")
        top = prov.lines[int(ids[order[0]])] if len(ids) else None
        top_programs = tuple(prov.programs[int(p)] for p in np.unique(
            programs[lines == ids[order[0]]])[:4]) if len(ids) else ()
        message = (f"{label}: {total:,} wrong element{'s' if total != 1 else ''}, "
                   f"{'; '.join(parts)}{bounded}")
        return Cause("line", None, top, top_programs, message)


def _first_visit_cause(read: FirstRead) -> Cause:
    op = read.operand
    what = "output" if op.role == "output" else "scratch"
    head = (f"{operand_label(op)} is read at {read.line or 'an unknown line'} by program "
            f"{read.program} before any program wrote it")
    message = (f"{head} (a DMA writes it: is its wait missing, on another semaphore, or after "
               "the read?)" if read.dma else
               f"{head}: the {what} block is not initialised on its first visit (e.g. "
               "`@pl.when(pl.program_id(k) == 0)` zeroing an accumulator is missing or never "
               "runs)")
    return Cause("first-visit", operand_label(op), read.line, (read.program,), message)


def record_provenance(prepared: Prepared, kernel: Kernel, tiling: Tiling,
                      last_step: int | None = None) -> Recorded | None:
    """Re-run the kernel's programs with the line recorder (None: it does not apply, or
    could not run: nothing is said rather than a guess)."""
    try:
        recorder = _jax.line_recorder(kernel.handle.eqn)
        runner = _jax.program_runner(kernel)
        operands = _jax.kernel_operands(prepared.capture.handle.closed_jaxpr,
                                        prepared.flat_args, kernel)
    except Exception:  # the body holds what the recorder cannot follow
        return None
    if operands is None:
        return None
    try:
        replay = Replay(kernel, tiling, runner, recorder, operands)
        recorded = replay.run(last_step)
    except Exception:
        return None
    reads = tuple(dataclasses.replace(r, reaches=_reaches(replay, r, last_step))
                  if k < MAX_REFILLS and not r.dma else r
                  for k, r in enumerate(recorded.first_reads))
    return dataclasses.replace(recorded, first_reads=reads, replay=replay)


def _reaches(replay: Replay, read: FirstRead, last_step: int | None
             ) -> dict[str, np.ndarray] | None:
    """Per output, the written elements whose value changes when the operand `read` found
    unwritten starts with another fill (None: it cannot be refilled, or the re-run failed)."""
    try:
        other = Replay(replay.kernel, replay.tiling, replay.runner, replay.recorder,
                        replay.operands, refill=read.tracked)
        if not other.refilled:
            return None
        other.run(last_step)
    except Exception:
        return None
    found = {}
    for j, op in enumerate(replay.kernel.outputs):
        a = replay._unpadded(replay.n_in + j, replay.arrays[replay.n_in + j])
        b = other._unpadded(other.n_in + j, other.arrays[other.n_in + j])
        written = replay._unpadded(replay.n_in + j, replay.shadows[j]) > 0
        # NaN in both runs is no evidence: another operand no program wrote may be what
        # keeps it NaN, hiding this one's value, so such an element counts as reached
        with np.errstate(invalid="ignore"):
            same = a == b
        found[op.origin] = written & ~same
    return found


def _other_fill(dtype: np.dtype) -> Any:
    """A second fill for memory no program wrote, unlike the interpreter's (NaN, int min,
    False); None for other types (semaphores)."""
    if "float" in dtype.name:
        return 1.0
    if np.issubdtype(dtype, np.integer):
        return 1
    if dtype == np.bool_:
        return True
    return None


class Replay:
    """The grid's programs in order on padded numpy arrays (as the stepper runs them), with
    shadows of the outputs and scratch."""

    def __init__(self, kernel: Kernel, tiling: Tiling, runner: Any, recorder: Any,
                 operands: Sequence[Any], refill: int | None = None) -> None:
        self.kernel, self.tiling, self.runner, self.recorder = kernel, tiling, runner, recorder
        self.operands = operands
        n_dyn = kernel.handle.num_dynamic_grid
        n_pre = len(kernel.scalar_prefetch)
        self.scalars = tuple(np.asarray(x) for x in operands[n_dyn:n_dyn + n_pre])
        inputs = [np.asarray(x) for x in operands[n_dyn + n_pre:]]
        outputs = []
        for j, op in enumerate(kernel.outputs):
            aliased = [i for i, o in runner.aliases if o == j]
            outputs.append(inputs[aliased[0]].copy() if aliased else
                           _jax.uninitialized(op.shape, op.dtype))
        self.ops = [op for op in kernel.operands if not op.scalar_prefetch
                    and op.role != "scratch"]
        self.arrays = [self._padded(j, x) for j, x in enumerate([*inputs, *outputs])]
        self.n_in = len(inputs)
        # An aliased output starts as its input's values: -1, read freely, written by no one.
        aliased_outputs = {o for _, o in runner.aliases}
        self.shadows = [np.full(a.shape, -1 if j in aliased_outputs else 0, np.int32)
                        for j, a in enumerate(self.arrays[self.n_in:])]
        self.scratch = tuple(np.array(s) for s in runner.scratch_init)
        self.scratch_shadows = [np.zeros(s, np.int32) for s in
                                recorder.tracked_shapes[len(kernel.outputs):]]
        self.lines = len(recorder.lines) + 1
        self.refilled = refill is not None and self._refill(refill)

    def _refill(self, tracked: int) -> bool:
        """Start the output or scratch buffer `tracked` with `_other_fill` (False: cannot)."""
        n_out = len(self.kernel.outputs)
        if tracked < 0:
            return False
        if tracked < n_out:
            j = self.n_in + tracked
            fill = _other_fill(self.arrays[j].dtype)
            if fill is None:
                return False
            self.arrays[j] = np.where(self.shadows[tracked] == 0,
                                      np.asarray(fill, self.arrays[j].dtype), self.arrays[j])
            return True
        k = tracked - n_out
        if k >= len(self.scratch):
            return False
        fill = _other_fill(self.scratch[k].dtype)
        if fill is None:
            return False
        scratch = list(self.scratch)
        scratch[k] = np.full_like(scratch[k], fill)
        self.scratch = tuple(scratch)
        return True

    def _padded(self, j: int, x: np.ndarray) -> np.ndarray:
        r = self.runner
        fill = _jax.uninitialized((), x.dtype)
        if any(p != (0, 0) for p in r.element_padding[j]):
            x = np.pad(x, r.element_padding[j], constant_values=fill)
        target = tuple(-(-s // b) * b for s, b in zip(x.shape, r.block_shapes[j], strict=True))
        if target != x.shape:
            x = np.pad(x, [(0, t - s) for s, t in zip(x.shape, target, strict=True)],
                       constant_values=fill)
        return np.array(x, copy=True)

    def _region(self, j: int, step: int) -> tuple[slice, ...]:
        r = self.runner
        row = self.tiling.operands[self.ops[j].origin].block_indices[step].astype(np.int64)
        scale = np.array([b if blocked else 1 for b, blocked in
                          zip(r.block_shapes[j], r.blocked[j], strict=True)], np.int64)
        limit = np.array(self.arrays[j].shape, np.int64) - np.array(r.block_shapes[j])
        start = np.clip(row * scale, 0, np.maximum(limit, 0))
        return tuple(slice(int(s), int(s) + b)
                     for s, b in zip(start, r.block_shapes[j], strict=True))

    def run(self, last_step: int | None) -> Recorded:
        total = self.tiling.programs
        want = total if last_step is None else last_step + 1
        ran = min(want, MAX_PROGRAMS)
        ids = self.tiling.program_ids()
        first_reads: dict[int, FirstRead] = {}
        for step in range(ran):
            self._one(step, ids[step], first_reads)
        return Recorded(self._provenance(ran == want), tuple(first_reads.values()), ran, total)

    def _one(self, step: int, ids: np.ndarray, first_reads: dict[int, FirstRead]) -> None:
        r = self.runner
        regions = [self._region(j, step) for j in range(len(self.arrays))]
        blocks = [_squeeze(self.arrays[j][regions[j]], r.squeezed[j])
                  for j in range(len(self.arrays))]
        shadows = [_squeeze(s[regions[self.n_in + j]], r.squeezed[self.n_in + j])
                   for j, s in enumerate(self.shadows)]
        stamp = np.int32((step + 1) * self.lines)
        outs, scratch, new_shadows, reads = self.recorder.run(
            np.asarray(ids, np.int32), stamp, self.scalars, blocks, self.scratch,
            [*shadows, *self.scratch_shadows])
        self.recorder.spins.check(RuntimeError)  # a loop stopped by its bound: no guess
        for j, new in enumerate(outs):
            if j >= self.n_in:
                region = regions[j]
                self.arrays[j][region] = np.asarray(new).reshape(self.arrays[j][region].shape)
        n_out = len(self.shadows)
        for j, new in enumerate(new_shadows[:n_out]):
            region = regions[self.n_in + j]
            self.shadows[j][region] = np.asarray(new).reshape(self.shadows[j][region].shape)
        self.scratch = tuple(np.asarray(s) for s in scratch)
        self.scratch_shadows = [np.asarray(s) for s in new_shadows[n_out:]]
        self._note_reads(np.asarray(reads), step, first_reads)

    def _note_reads(self, reads: np.ndarray, step: int,
                    first_reads: dict[int, FirstRead]) -> None:
        tracked = [*self.kernel.outputs, *self.kernel.scratch]
        for site in np.flatnonzero(reads):
            j = self.recorder.read_operand.get(int(site))
            if j is None or j >= len(tracked) or j in first_reads:
                continue
            first_reads[j] = FirstRead(tracked[j], short_source(
                self.recorder.read_lines[int(site)]), self.tiling.program_at(step),
                j in self.recorder.dma_targets, tracked=j)

    def _provenance(self, complete: bool) -> dict[str, Provenance]:
        lines = tuple(short_source(s) or "an unknown line" for s in self.recorder.lines)
        found = {}
        for j, op in enumerate(self.kernel.outputs):
            stamps = self._unpadded(self.n_in + j, self.shadows[j])
            written = stamps > 0
            step = np.where(written, stamps // self.lines - 1, -1)
            line = np.where(written, stamps % self.lines - 1, -1).astype(np.int32)
            steps, index = np.unique(step[written], return_inverse=True)
            program_of = np.full(step.shape, -1, np.int32)
            program_of[written] = index.reshape(-1).astype(np.int32)
            found[op.origin] = Provenance(program_of, line, tuple(
                self.tiling.programs_at(steps)), lines, complete)
        return found

    def _unpadded(self, j: int, x: np.ndarray) -> np.ndarray:
        pad = self.runner.element_padding[j]
        region = tuple(slice(lo, lo + s) for (lo, _), s in zip(pad, self.ops[j].shape,
                                                               strict=True))
        return x[region]


def _squeeze(block: np.ndarray, squeezed: tuple[bool, ...]) -> np.ndarray:
    axes = tuple(i for i, s in enumerate(squeezed) if s)
    return block.squeeze(axis=axes) if axes else block

"""The program stepper: run one grid program at a time over simulated HBM.

`st = pallaslab.step(fn, *args, kernel=0)` captures `fn`, runs it (interpreted) up to the
chosen kernel to get that kernel's concrete operands, and then runs the kernel's programs one
by one, in execution order, exactly as JAX's HLO interpreter (`interpret=True`) does: each
program reads its blocks from the (padded) arrays, runs the discharged kernel body, and writes
its blocks back; scratch persists from program to program. Outputs are read-modify-written at
every step, which is what TPU does for an accumulator revisited in consecutive steps. After the
last program the outputs equal the `interpret` executor's bit for bit.

A TPU mesh kernel (`pl.kernel` / `pl.core_map`) is stepped core by core: its programs are its
cores (program ids = mesh coordinates, `axis_index` of a mesh axis = the core's coordinate),
each operand one whole-array block carried from core to core, each core with its own fresh
scratch. Cores that signal each other cannot run alone: `step` steps such kernels with
`pallaslab.execute.stepping.core_stepper.CoreStepper` (their cores together under tpu-interpret,
each held at its start until stepped).

The single-program function is compiled once (`jax.jit` of the kernel body, taking program
ids, scalar-prefetch values, blocks and scratch). History keeps, per step, only the blocks and
scratch values that step changed (their previous contents), so `back()` is cheap and memory
grows with the blocks touched, not with the arrays.

Each program runs in the executor worker process (`pallaslab.execute.worker.isolation`), so a
program that spins inside a compiled loop can be stopped: at the time limit (`timeout=` seconds per
program, else $PALLASLAB_TIMEOUT, else 300 s) the worker is killed and `StepTimeLimitError`
raised; on Ctrl-C it is killed and `KeyboardInterrupt` raised. Either way the stepper stays
where it was (the program that was stopped left no trace) and the next step opens the runner
again in a fresh worker. Only `runner.run` travels: this process keeps the arrays, the history
and the compiled runner it uses for `equations()`. A function that cannot be pickled runs its
programs in this process instead, and `notes` says the time limit is not enforced there.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pallaslab.analysis.tiling import Tiling, tile, tiling_unavailable_reason
from pallaslab.errors import PallasLabError, UnavailableError
from pallaslab.execute.data import DEFAULT_SEED
from pallaslab.execute.executors import capabilities
from pallaslab.execute.executors.choice import needs_tpu_semantics
from pallaslab.execute.executors.semaphore_refusals import passed_semaphore
from pallaslab.execute.prepared import prepare
from pallaslab.execute.protocol import Prepared
from pallaslab.execute.stepping.mesh_stepping import (
    CoresSignalEachOther,
    mesh_note,
    mesh_runner_or_raise,
    mesh_tiling,
)
from pallaslab.execute.stepping.step_worker import (
    RUNNER_KEYS,
    CannotOpen,
    RemoteRunner,
)
from pallaslab.execute.worker import isolation
from pallaslab.execute.worker.monitor import Interruptible, progress
from pallaslab.model import Kernel, _jax, select_kernel

if TYPE_CHECKING:
    pass

PROGRESS_MIN_STEPS = 64  # loops this long may show a progress bar (after its delay)


class ProgramOutsideGridError(PallasLabError, IndexError):
    """`goto` was given program ids that are not in the kernel's grid."""


@dataclasses.dataclass(frozen=True)
class ProgramBlocks:
    """One operand's block in one program: as the program read it and as it left it."""

    origin: str
    block_index: tuple[int, ...]
    start: tuple[int, ...]  # first element (in the array as the interpreter pads it)
    read: np.ndarray
    written: np.ndarray

    @property
    def changed(self) -> bool:
        return self.read.tobytes() != self.written.tobytes()


@dataclasses.dataclass(frozen=True)
class _Delta:
    """What one step overwrote: (operand position, region, previous contents), scratch."""

    blocks: tuple[tuple[int, tuple[slice, ...], np.ndarray], ...]
    scratch: tuple[np.ndarray, ...] | None  # scratch before the step, if the step changed it

    @property
    def nbytes(self) -> int:
        total = sum(b.nbytes for _, _, b in self.blocks)
        return total + (sum(s.nbytes for s in self.scratch) if self.scratch else 0)


class Stepper:
    """Steps one kernel of a function program by program (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any],
                 kwargs: Mapping[str, Any] | None = None, *, kernel: int | str = 0,
                 seed: int = DEFAULT_SEED, timeout: float | None = None):
        self.time_limit = isolation.time_limit(timeout)  # seconds per program (inf: none)
        self.notes: list[str] = []  # how the programs run, when it is not the usual way
        prepared = prepare(fn, args, kwargs, seed=seed)
        self.kernel: Kernel = select_kernel(prepared.capture, kernel)
        # A mesh kernel's programs are its cores (TPU) or blocks (Mosaic GPU): program ids
        # are mesh (grid) coordinates.
        self._per_core = self.kernel.kind == "mesh"
        runner = mesh_runner_or_raise(self.kernel) if self._per_core else None
        self.tiling: Tiling = mesh_tiling(self.kernel, runner) if runner is not None else \
            _tiling_or_raise(self.kernel)
        operands = _jax.kernel_operands(prepared.capture.handle.closed_jaxpr,
                                        prepared.flat_args, self.kernel)
        if operands is None:
            raise UnavailableError(
                f"kernel {self.kernel.name} runs inside {' > '.join(self.kernel.context)} and "
                "is not launched once with these arguments (a cond branch not taken, a loop "
                "that runs zero times, or a mapped region such as shard_map), so it cannot be "
                "stepped. Step a function that launches it directly.")
        self._runner = runner or _jax.program_runner(self.kernel)
        if any(op.is_semaphore for op in (*self.kernel.inputs, *self.kernel.outputs)):
            self.notes.append(
                f"a DMA semaphore passes between pallas_calls ("
                f"{passed_semaphore(list(prepared.capture))}): the kernels before "
                f"{self.kernel.name} ran as pallaslab's interpret runs them, a copy started in "
                "one completing at the wait on its semaphore in a later one; stepped, "
                f"{self.kernel.name}'s own copies land as they start")
        if self._per_core:
            self.notes.append(mesh_note(self.kernel))
        if (why := needs_tpu_semantics([self.kernel])) is not None:
            self.notes.append(
                f"stepping runs each program with interpret mode's semantics: every DMA lands "
                f"as it starts and no semaphore wait blocks, so a missing wait or signal, or a "
                f"read before its wait, steps cleanly here ({why.split(': ')[0]}); "
                f"pallaslab.run and compare use TPU interpret mode, which finds them")
        self._remote = self._remote_runner(prepared)
        self._ids = self.tiling.program_ids()
        self._init_state(operands)
        self._history: list[_Delta] = []
        self._last: tuple[int, dict[str, ProgramBlocks], tuple[np.ndarray, ...]] | None = None

    def _remote_runner(self, prepared: Prepared) -> RemoteRunner | None:
        """The runner in the worker process (opened on first use), or None, with a note,
        when the function cannot travel there."""
        key = f"{os.getpid()}-{next(RUNNER_KEYS)}"
        try:
            request = isolation.encode_request(
                {"fn": prepared.fn, "args": prepared.args, "kwargs": prepared.kwargs,
                 "kernel": self.kernel.index, "runner": key, "name": self.kernel.name,
                 "grid": tuple(self.kernel.grid),
                 **capabilities.retrace_context(prepared.capture)}, kind="open-stepper")
        except Exception as err:
            self._run_here(isolation.why_not_sent(err))
            return None
        return RemoteRunner(request, key, self.kernel.name)

    def _run_here(self, why: str) -> None:
        self._remote = None
        self.notes.append(f"programs run in this process ({why}): the time limit of "
                          f"{self.time_limit:g} s is not enforced for a single program, and "
                          "only a restart of the Python kernel stops one that never ends")

    # -- state ----------------------------------------------------------------------------

    def _init_state(self, operands: Sequence[Any]) -> None:
        r = self._runner
        n_dyn = self.kernel.handle.num_dynamic_grid
        n_pre = len(self.kernel.scalar_prefetch)
        self._scalars = tuple(np.asarray(x) for x in operands[n_dyn:n_dyn + n_pre])
        inputs = [np.asarray(x) for x in operands[n_dyn + n_pre:]]
        outputs = []
        for j, op in enumerate(self.kernel.outputs):
            aliased = [i for i, o in r.aliases if o == j]
            outputs.append(inputs[aliased[0]].copy() if aliased else
                           _jax.semaphore_counts(op.shape) if op.is_semaphore else
                           _jax.uninitialized(op.shape, op.dtype))
        ops = [op for op in self.kernel.operands if not op.scalar_prefetch
               and op.role != "scratch"]
        self._origins = tuple(op.origin for op in ops)
        self._shapes = tuple(op.shape for op in ops)
        self._arrays = [self._padded(j, x) for j, x in enumerate([*inputs, *outputs])]
        self._scratch = tuple(np.array(s) for s in r.scratch_init)
        self._starts = [self._start_table(j) for j in range(len(ops))]

    def _padded(self, j: int, x: np.ndarray) -> np.ndarray:
        r = self._runner
        pad = r.element_padding[j]
        fill = _jax.uninitialized((), x.dtype)
        if any(p != (0, 0) for p in pad):
            x = np.pad(x, pad, constant_values=fill)
        target = tuple(-(-s // b) * b for s, b in zip(x.shape, r.block_shapes[j], strict=True))
        if target != x.shape:
            x = np.pad(x, [(0, t - s) for s, t in zip(x.shape, target, strict=True)],
                       constant_values=fill)
        return np.array(x, copy=True)

    def _start_table(self, j: int) -> np.ndarray:
        """(P, ndim) starts in the padded array, clamped like XLA's dynamic_slice."""
        r = self._runner
        table = self._block_indices(j).astype(np.int64)
        scale = np.array([b if blocked else 1 for b, blocked in
                          zip(r.block_shapes[j], r.blocked[j], strict=True)], np.int64)
        limit = np.array(self._arrays[j].shape, np.int64) - np.array(r.block_shapes[j])
        return np.clip(table * scale, 0, np.maximum(limit, 0))

    def _block_indices(self, j: int) -> np.ndarray:
        """(P, ndim) block indices of operand j; a semaphore passed in or out (no BlockSpec:
        the kernel takes all of it) is one block, the same in every program."""
        tiled = self.tiling.operands.get(self._origins[j])
        if tiled is not None:
            return tiled.block_indices
        return np.zeros((self.programs, len(self._shapes[j])), np.int32)

    def _region(self, j: int, step: int) -> tuple[slice, ...]:
        start = self._starts[j][step]
        return tuple(slice(int(s), int(s) + b)
                     for s, b in zip(start, self._runner.block_shapes[j], strict=True))

    # -- stepping -------------------------------------------------------------------------

    @property
    def programs(self) -> int:
        return self.tiling.programs

    @property
    def position(self) -> int:
        """How many programs have run."""
        return len(self._history)

    @property
    def done(self) -> bool:
        return self.position == self.programs

    @property
    def program(self) -> tuple[int, ...] | None:
        """Program ids of the last program run (None before any)."""
        return self.tiling.program_at(self.position - 1) if self._history else None

    def step(self, n: int = 1) -> tuple[int, ...] | None:
        """Run the next `n` programs (fewer at the end of the grid); returns `program`."""
        self._loop(min(n, self.programs - self.position), lambda: False)
        return self.program

    def back(self, n: int = 1) -> tuple[int, ...] | None:
        """Undo the last `n` programs; returns `program`."""
        for _ in range(min(n, self.position)):
            delta = self._history.pop()
            for j, region, old in delta.blocks:
                self._arrays[j][region] = old
            if delta.scratch is not None:
                self._scratch = delta.scratch
        self._last = None
        return self.program

    def goto(self, program_ids: Sequence[int] | int) -> tuple[int, ...] | None:
        """Run or undo programs until `program_ids` is the last program run (an int for a
        1-D grid)."""
        target = self._step_of(program_ids) + 1
        if target < self.position:
            return self.back(self.position - target)
        return self.step(target - self.position)

    def run_to(self, predicate: Callable[[Stepper], bool]) -> tuple[int, ...] | None:
        """Run programs until one satisfies `predicate(stepper)` (checked after each);
        returns its ids, or None when the grid ended first."""
        found = self._loop(self.programs - self.position, lambda: predicate(self))
        return self.program if found else None

    def reset(self) -> None:
        self.back(self.position)

    def _step_of(self, program_ids: Sequence[int] | int) -> int:
        grid = tuple(self.tiling.grid)
        try:
            ids = (operator.index(program_ids),) if not isinstance(program_ids, Sequence) \
                else tuple(operator.index(i) for i in program_ids)
        except TypeError:
            ids = None
        if ids is None or len(ids) != len(grid):
            example = (f"goto({grid[0] - 1})" if len(grid) == 1 else
                       f"goto({tuple(g - 1 for g in grid)})")
            raise ProgramOutsideGridError(
                f"goto({program_ids!r}): kernel {self.kernel.name} has the {len(grid)}-D grid "
                f"{grid}; give one program id per grid dimension, e.g. {example}")
        if not all(0 <= i < g for i, g in zip(ids, grid, strict=True)):
            raise ProgramOutsideGridError(f"program {ids} is outside the grid {grid}")
        return self.tiling.step_of(ids)

    def _loop(self, n: int, stop: Callable[[], bool]) -> bool:
        bar = progress(n, f"stepping {self.kernel.name}") if n >= PROGRESS_MIN_STEPS else None
        try:
            with Interruptible() as flag:
                for _ in range(n):
                    if flag.cancelled:
                        raise KeyboardInterrupt(
                            f"stepping stopped after program {self.program}")
                    self._run_one()
                    if bar is not None:
                        bar.update(1)
                    if stop():
                        return True
        finally:
            if bar is not None:
                bar.close()
        return False

    def _run_one(self) -> None:
        step = self.position
        r = self._runner
        regions = [self._region(j, step) for j in range(len(self._arrays))]
        read = [self._arrays[j][regions[j]].copy() for j in range(len(self._arrays))]
        blocks = tuple(_squeeze(b, r.squeezed[j]) for j, b in enumerate(read))
        # Each core of a mesh kernel has its own scratch (VMEM, SMEM, semaphores).
        scratch_in = tuple(np.array(x) for x in r.scratch_init) if self._per_core else \
            self._scratch
        outs, scratch = self._run_program(step, blocks, scratch_in)
        changed = []
        written = []
        for j, (old, new) in enumerate(zip(read, outs, strict=True)):
            new = np.asarray(new).reshape(old.shape)
            written.append(new)
            if old.tobytes() != new.tobytes():
                changed.append((j, regions[j], old))
                self._arrays[j][regions[j]] = new
        new_scratch = tuple(np.asarray(s) for s in scratch)
        scratch_changed = any(a.tobytes() != b.tobytes()
                              for a, b in zip(self._scratch, new_scratch, strict=True))
        self._history.append(_Delta(tuple(changed), self._scratch if scratch_changed else None))
        before = scratch_in
        self._scratch = new_scratch
        self._last = (step, {
            origin: ProgramBlocks(
                origin, tuple(int(v) for v in
                              self._block_indices(j)[step]),
                tuple(int(s) for s in self._starts[j][step]), read[j], written[j])
            for j, origin in enumerate(self._origins)}, before)

    def _run_program(self, step: int, blocks: tuple[np.ndarray, ...],
                     scratch: tuple[np.ndarray, ...]) -> tuple[Sequence[Any], Sequence[Any]]:
        ids = self._ids[step]
        remote = self._remote
        if remote is not None:
            try:
                return remote.run(self.tiling.program_at(step), ids, self._scalars, blocks,
                                  scratch, self.time_limit, self._stop_after)
            except CannotOpen as err:
                self._run_here(str(err))
        return self._runner.run(ids, self._scalars, blocks, scratch)

    def _stop_after(self, program: tuple[int, ...], seconds: float | None) -> str:
        """What is said when `program` is stopped (`seconds` None: by its time limit)."""
        before = self.program
        where = ("before any program" if before is None else f"after program {before}")
        if seconds is not None:
            return (f"stepping {self.kernel.name} interrupted while running program {program} "
                    f"of {self.kernel.name} after {seconds:.1f} s (the stepper stays {where})")
        return (f"stepping {self.kernel.name}: program {program} did not finish within the "
                f"time limit of {self.time_limit:g} s and was stopped (its worker process was "
                f"killed); the stepper stays {where}. A program that never ends often loops on "
                "a condition that never turns false; if it just needs longer, raise the limit "
                "with pallaslab.step(..., timeout=SECONDS) or $PALLASLAB_TIMEOUT "
                "(math.inf for none).")

    # -- what the user looks at --------------------------------------------------------------

    def blocks(self) -> Mapping[str, ProgramBlocks]:
        """origin -> the last program's block of that operand, as read and as written."""
        return self._current()[1]

    def scratch(self) -> tuple[np.ndarray, ...]:
        """Scratch buffers as they stand."""
        return tuple(s.copy() for s in self._scratch)

    def outputs(self) -> tuple[np.ndarray, ...]:
        """The kernel's outputs as they stand (unwritten elements are NaN / int min)."""
        n_in = self._runner.num_inputs
        return tuple(self._unpadded(n_in + j) for j in range(self._runner.num_outputs))

    def equations(self) -> list[_jax.EquationValue]:
        """The last program's kernel body, equation by equation, with every value and the
        Python line that produced it."""
        step, blocks, scratch_before = self._current()
        r = self._runner
        inputs = [_squeeze(blocks[o].read, r.squeezed[j]) for j, o in enumerate(self._origins)]
        return _jax.program_equations(r, [int(i) for i in self._ids[step]], self._scalars,
                                      inputs, scratch_before)

    def history_nbytes(self) -> int:
        """Bytes the undo history holds (blocks and scratch overwritten so far)."""
        return sum(d.nbytes for d in self._history)

    def _current(self) -> tuple[int, dict[str, ProgramBlocks], tuple[np.ndarray, ...]]:
        if not self._history:
            raise IndexError("no program has run yet: call step() first")
        if self._last is None or self._last[0] != self.position - 1:
            self._rerun_last()
        assert self._last is not None
        return self._last

    def _rerun_last(self) -> None:
        """Re-run the last program to recover what it read; if that fails (a time limit,
        Ctrl-C), the stepper is left exactly as it was."""
        delta = self._history[-1]
        after = [(j, region, self._arrays[j][region].copy()) for j, region, _ in delta.blocks]
        scratch_after = self._scratch
        self.back(1)
        try:
            self._run_one()
        except BaseException:
            for j, region, new in after:
                self._arrays[j][region] = new
            self._scratch = scratch_after
            self._history.append(delta)
            raise

    def _unpadded(self, j: int) -> np.ndarray:
        x = self._arrays[j]
        pad = self._runner.element_padding[j]
        region = tuple(slice(lo, lo + s) for (lo, _), s in zip(pad, self._shapes[j],
                                                               strict=True))
        return x[region].copy()

    def __repr__(self) -> str:
        return (f"<Stepper {self.kernel.name}: {self.position}/{self.programs} programs run, "
                f"last {self.program}>")


def _squeeze(block: np.ndarray, squeezed: tuple[bool, ...]) -> np.ndarray:
    axes = tuple(i for i, s in enumerate(squeezed) if s)
    return block.squeeze(axis=axes) if axes else block


def _tiling_or_raise(kernel: Kernel) -> Tiling:
    reason = tiling_unavailable_reason(kernel)
    t = tile(kernel) if reason is None else None
    if t is None:
        raise UnavailableError(f"kernel {kernel.name} cannot be stepped: "
                               f"{reason or 'its block index tables are unavailable'}")
    missing = [op.origin for op in kernel.blocked_operands if op.origin not in t.operands
               or any(d.kind == "bounded" for d in op.block_dims or ())]
    if missing:
        raise UnavailableError(
            f"kernel {kernel.name} cannot be stepped: operand(s) {', '.join(missing)} use "
            "bounded or indirect block dimensions, whose blocks the stepper cannot slice")
    unblocked = [op.origin for op in kernel.operands if op.role != "scratch"
                 and not op.scalar_prefetch and op.block_dims is None and not op.is_semaphore]
    if unblocked:
        raise UnavailableError(f"kernel {kernel.name} cannot be stepped: operand(s) "
                               f"{', '.join(unblocked)} have no BlockSpec")
    return t


def step(fn: Callable[..., Any], *args: Any, kernel: int | str | None = None,
         seed: int = DEFAULT_SEED, timeout: float | None = None, devices: int | None = None,
         **kwargs: Any) -> Any:
    """A stepper for one kernel of `fn(*args, **kwargs)`; nothing has run yet. Each program
    runs within `timeout` seconds (default $PALLASLAB_TIMEOUT, else 300 s). With `devices=N`,
    a kernel inside shard_map is stepped in lockstep on N simulated devices
    (`device_stepper.DeviceStepper`). A TPU mesh kernel whose cores signal each other is
    stepped core by core, its cores running together under tpu-interpret (`CoreStepper`).

    Args:
        fn: the function that launches the kernel.
        *args: its arguments: arrays, or `jax.ShapeDtypeStruct`s (filled with seeded random
            data).
        kernel: which kernel of the call to step: its index in launch order or its name
            (default the first). Not with `devices`: every kernel then steps, in lockstep.
        seed: the seed of the random data for abstract arguments.
        timeout: each program's time limit in seconds.
        devices: step a kernel inside `shard_map` on this many simulated CPU devices.
        **kwargs: the function's keyword arguments.

    Returns:
        A `Stepper` (`step()`, `back()`, `run_to(...)`, `blocks()`, ...), or a `DeviceStepper` /
        `CoreStepper` as above.

    Raises:
        KernelSelectionError: `kernel` names no kernel of the call (or comes with `devices`).
        UnavailableError: the kernel cannot be stepped here (the message says why).
    """
    if devices is not None:
        from pallaslab.execute.stepping.device_stepper import DeviceStepper

        return DeviceStepper(fn, args, kwargs, devices=devices, seed=seed, timeout=timeout,
                             kernel=kernel)
    kernel = 0 if kernel is None else kernel
    try:
        return Stepper(fn, args, kwargs, kernel=kernel, seed=seed, timeout=timeout)
    except CoresSignalEachOther:
        from pallaslab.execute.stepping.core_stepper import CoreStepper

        return CoreStepper(fn, args, kwargs, kernel=kernel, seed=seed, timeout=timeout)

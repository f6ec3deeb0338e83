"""Watching a run from the inside: which program is running, what it prints, progress, Ctrl-C.

Executors make every kernel report the start of each program (an instrumented kernel body for
`interpret`, TPU interpret mode's `grid_point_recorder` for `tpu-interpret`). The monitor
turns those reports into: the current program per thread (so `pl.debug_print` lines, which JAX
writes to `sys.stdout`, are attributed to the program that printed them), a tqdm progress bar
(shown only for runs longer than `PROGRESS_DELAY` seconds), and clean interruption: Ctrl-C sets
a flag, the next program start stops the run, and the executor raises `KeyboardInterrupt`.
"""

from __future__ import annotations

import contextlib
import io
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pallaslab.execute.result import ProgramPrint
from pallaslab.model import Kernel

PROGRESS_DELAY = 2.0  # seconds before a progress bar appears


class Cancelled(Exception):
    """Raised inside a host callback to stop an interrupted run."""


class TimeLimit(Cancelled):
    """Raised inside a host callback when the run's time limit has passed."""


# Where an executor worker process publishes the program now running, for the parent to read
# when it has to stop the run (see `pallaslab.execute.worker.isolation`): [programs run, kernel,
# launch, rank, program ids...]. None outside a worker.
STATUS_SLOT: Any = None
STATUS_MAX_RANK = 12


def publish_status(programs_run: int, kernel: int, launch: int,
                   program: tuple[int, ...] | None) -> None:
    slot = STATUS_SLOT
    if slot is None:
        return
    ids = program or ()
    rank = min(len(ids), STATUS_MAX_RANK)
    slot[1], slot[2], slot[3] = kernel, launch, rank if program is not None else -1
    slot[4:4 + rank] = ids[:rank]
    slot[0] = programs_run  # written last: a reader that sees the count sees its program


class RunMonitor(io.TextIOBase):
    def __init__(self, kernels: Sequence[Kernel], *, desc: str, total: int | None = None,
                 deadline: float | None = None):
        self.kernels = list(kernels)
        self.desc = desc
        self.total = total
        self.deadline = deadline  # time.monotonic() after which the next program start stops
        self.timed_out = False
        self.cancelled = False
        self.programs_run = 0
        self.kernel_now: int | None = None
        self._by_thread: dict[int, tuple[int, tuple[int, ...] | None, int]] = {}
        self._by_core: dict[int, tuple[int, tuple[int, ...] | None, int]] = {}
        self._counts: dict[int, int] = {}
        self._pending: dict[int, str] = {}
        self._prints: list[ProgramPrint] = []
        self._lock = threading.Lock()
        self._bar: Any = None
        self.last: tuple[int, tuple[int, ...] | None, int] | None = None  # newest program
        self.failed_checks: list[tuple[tuple[int, tuple[int, ...] | None, int] | None, str]] \
            = []

    def running(self) -> str:
        """The program that was running last, in words (for time-limit messages)."""
        return describe_program(self.kernels, self.last, self.programs_run)

    # -- reports from inside the run (host callbacks) ---------------------------------------

    def enter_next(self, kernel: int) -> None:
        """The next program of `kernel` starts (programs run in execution order)."""
        count = self._counts.get(kernel, 0)
        self._counts[kernel] = count + 1
        grid = self.kernels[kernel].grid
        programs = self.kernels[kernel].programs
        if programs:
            launch, step = divmod(count, programs)
            program = tuple(int(i) for i in _unravel(step, grid))  # type: ignore[arg-type]
        else:
            launch, program = 0, None
        self._enter(kernel, program, launch, core=None)

    def enter(self, kernel: int, program: tuple[int, ...], core: int) -> None:
        """A program with known ids starts on `core` (TPU interpret mode's recorder)."""
        count = self._counts.get(kernel, 0)
        self._counts[kernel] = count + 1
        programs = self.kernels[kernel].programs or 1
        self._enter(kernel, program, count // programs, core)

    def _enter(self, kernel: int, program: tuple[int, ...] | None, launch: int,
               core: int | None) -> None:
        if self.cancelled:
            raise Cancelled("interrupted")
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.timed_out = self.cancelled = True
            raise TimeLimit("time limit")
        where = (kernel, program, launch)
        with self._lock:
            self._flush_thread(threading.get_ident())
            self._by_thread[threading.get_ident()] = where
            if core is not None:
                self._by_core[core] = where
            self.kernel_now = kernel
            self.programs_run += 1
            self.last = where
        publish_status(self.programs_run, kernel, launch, program)
        if self._bar is not None:
            self._bar.update(1)

    def check_failed(self, message: str) -> None:
        """A `pl.debug_check` failed in the program running on this thread."""
        with self._lock:
            where = self._by_thread.get(threading.get_ident()) or self._latest()
            self.failed_checks.append((where, message))

    def program_on_core(self, core: int) -> tuple[int, tuple[int, ...] | None, int] | None:
        return self._by_core.get(core)

    # -- stdout ------------------------------------------------------------------------------

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        ident = threading.get_ident()
        with self._lock:
            buffered = self._pending.get(ident, "") + text
            *lines, rest = buffered.split("\n")
            self._pending[ident] = rest
            for line in lines:
                self._add(ident, line)
        return len(text)

    def _add(self, ident: int, line: str) -> None:
        where = self._by_thread.get(ident) or self._latest()
        kernel, program, launch = where if where else (None, None, 0)
        self._prints.append(ProgramPrint(kernel, program, line, launch))

    def _latest(self) -> tuple[int, tuple[int, ...] | None, int] | None:
        # JAX may run a callback on another thread than the program's marker: use the most
        # recently started program.
        return next(reversed(self._by_thread.values()), None) if self._by_thread else None

    def _flush_thread(self, ident: int) -> None:
        if self._pending.get(ident):
            self._add(ident, self._pending.pop(ident))

    @property
    def prints(self) -> tuple[ProgramPrint, ...]:
        with self._lock:
            for ident in list(self._pending):
                self._flush_thread(ident)
            return tuple(self._prints)

    # -- the run -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def watching(self) -> Iterator[RunMonitor]:
        self._bar = _progress_bar(self.total, self.desc)
        previous = _install_sigint(self)
        try:
            with contextlib.redirect_stdout(self):
                yield self
        finally:
            _restore_sigint(previous)
            if self._bar is not None:
                self._bar.close()
                self._bar = None


def describe_program(kernels: Sequence[Kernel],
                     where: tuple[int, tuple[int, ...] | None, int] | None,
                     programs_run: int) -> str:
    if where is None:
        return "before any program started (while tracing or compiling)"
    kernel, program, launch = where
    name = kernels[kernel].name if 0 <= kernel < len(kernels) else f"kernel {kernel}"
    shown = f"program {program}" if program is not None else "a program"
    again = f", launch {launch + 1}" if launch else ""
    return f"{shown} of {name}{again} ({programs_run:,} program(s) started)"


def _unravel(step: int, grid: Sequence[int]) -> tuple[int, ...]:
    out = []
    for g in reversed(grid):
        step, r = divmod(step, g)
        out.append(r)
    return tuple(reversed(out))


def _progress_bar(total: int | None, desc: str) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:  # progress is a nicety: no tqdm, no bar
        return None
    in_notebook = any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__)
    stream = sys.__stderr__
    if not in_notebook and not (stream is not None and stream.isatty()):
        return None  # a text bar in a log or a pipe is noise
    return tqdm(total=total, desc=desc, unit="program", delay=PROGRESS_DELAY, leave=False,
                file=stream)


def _install_sigint(monitor: RunMonitor) -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupted(signum: int, frame: Any) -> None:
        if monitor.cancelled:  # a second Ctrl-C: stop now, however messy
            raise KeyboardInterrupt
        monitor.cancelled = True

    return signal.signal(signal.SIGINT, interrupted)


def _restore_sigint(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGINT, previous)


def total_programs(kernels: Sequence[Kernel]) -> int | None:
    """Programs one run executes, when every kernel launches once with a known grid."""
    if any(k.context and any(c.startswith(("scan", "while", "cond")) for c in k.context)
           for k in kernels):
        return None
    sizes = [k.programs for k in kernels]
    return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)


class Interruptible:
    """A Ctrl-C flag for loops of our own (the stepper): the loop stops between steps."""

    def __init__(self) -> None:
        self.cancelled = False
        self._previous: Any = None

    def __enter__(self) -> Interruptible:
        if threading.current_thread() is threading.main_thread():
            def interrupted(signum: int, frame: Any) -> None:
                if self.cancelled:
                    raise KeyboardInterrupt
                self.cancelled = True

            self._previous = signal.signal(signal.SIGINT, interrupted)
        return self

    def __exit__(self, *exc: object) -> None:
        _restore_sigint(self._previous)


def progress(total: int, desc: str) -> Any:
    return _progress_bar(total, desc)

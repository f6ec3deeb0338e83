"""Deadlock detection for TPU interpret mode: a semaphore wait that can never be satisfied.

JAX's TPU interpreter runs each simulated device (and core) in a thread of its own; a core
waiting on a semaphore polls it forever (`Semaphore.wait`), so a kernel that waits for a signal
no one sends hangs until the run's time limit. `DeadlockWatch` looks at the interpreter's
threads while it runs: when every device is either waiting on a semaphore whose count is below
the awaited value with no pending DMA that could signal it, or has finished, and this holds on
two looks in a row, no thread can ever signal again. The watch then fails the interpreted run
(the interpreter's own failure mechanism, so every device stops) and keeps a `Deadlock` naming
each blocked core, the semaphore and the count it waits for.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pallaslab.model.source_names import short_source

POLL = 0.25  # seconds between looks at the interpreter's threads
FOUND: list[Deadlock] = []  # every deadlock found in this process, in order (a stepped
# run reads its own from here once it stopped)


@dataclasses.dataclass(frozen=True)
class BlockedWait:
    """One core waiting on a semaphore that can never reach the awaited value."""

    device: int
    core: int
    semaphore: int  # the interpreter's semaphore id
    value: int  # the count it waits for
    count: int  # the semaphore's count on that core when the run stopped
    source: str | None = None  # "file.py:LINE" of the wait, when the interpreter knows it

    @property
    def text(self) -> str:
        return self.named({})

    def named(self, names: Mapping[int, str]) -> str:
        """The wait, naming the semaphore by `names` (interpreter id -> the user's name)."""
        at = f" at {short_source(self.source)}" if self.source else ""
        sem = names.get(self.semaphore, f"#{self.semaphore}")
        return (f"waits on semaphore {sem}{at} for a count of {self.value}, "
                f"which stays at {self.count}")


@dataclasses.dataclass(frozen=True)
class Deadlock:
    waits: tuple[BlockedWait, ...]
    finished_devices: int  # devices that had finished and waited for the others
    num_devices: int
    # (device, core) of the other cores of the blocked devices: they had finished
    finished_cores: tuple[tuple[int, int], ...] = ()

    @property
    def message(self) -> str:
        return self.describe()

    def describe(self, names: Mapping[int, str] | None = None, several_cores: bool = True
                 ) -> str:
        """The message, naming semaphores by `names` (interpreter id -> the user's name,
        e.g. "scratch[2][0]"); `several_cores` False: the kernel runs on one core (no
        parallel dimension), so the interpreter's other cores, idle, go unmentioned."""
        names = names or {}
        if self.num_devices == 1:  # the cores of one device (a mesh kernel's)
            if not several_cores and len(self.waits) == 1:
                return (f"the kernel is blocked for good: it {self.waits[0].named(names)}. A "
                        "signal or DMA that never happens (a missing signal, a second wait on "
                        "the same copy, a wait for more than is sent) leaves its waiter "
                        "blocked forever")
            blocked = "; ".join(f"core {w.core} {w.named(names)}" for w in self.waits)
            done = [c for _, c in self.finished_cores] if several_cores else []
            finished = (f"; core{'s' if len(done) > 1 else ''} "
                        f"{', '.join(map(str, done))} had finished" if done else "")
            return (f"every core is blocked and none can signal again: {blocked}"
                    f"{finished}. A signal that never happens (a missing signal, a wrong "
                    "core_index, a wait for more than is sent) leaves its waiter blocked "
                    "forever")
        blocked = "; ".join(f"device {w.device} (core {w.core}) {w.named(names)}"
                            for w in self.waits)
        finished = (f"; {self.finished_devices} other device(s) had finished"
                    if self.finished_devices else "")
        return (f"every device is blocked and none can signal again: {blocked}"
                f"{finished}. A signal or DMA that never happens (a missing signal, a wrong "
                "device id, a wait for more than is sent) leaves its waiter blocked forever")


class DeadlockError(RuntimeError):
    """Raised inside the interpreted run to stop a deadlocked kernel."""


class DeadlockWatch:
    """Context manager watching TPU interpret mode for a deadlock while a run is in it."""

    def __init__(self, poll: float = POLL):
        self.poll = poll
        self.found: Deadlock | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pallaslab-deadlock-watch",
                                        daemon=True)

    def __enter__(self) -> DeadlockWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        previous: tuple[Any, ...] | None = None
        while not self._stop.wait(self.poll):
            snapshot = _blocked_state()
            if snapshot is None:
                previous = None
                continue
            shared, state = snapshot
            if state == previous:  # the same on two looks: nothing can change it any more
                self.found = _deadlock(shared, state)
                FOUND.append(self.found)
                shared.set_failed(DeadlockError(self.found.message), top_level=False)
                return
            previous = state


def _chain(frame: Any) -> list[Any]:
    chain = []
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    return chain


def _codes() -> tuple[Any, Any]:
    from jax._src.pallas.mosaic.interpret import shared_memory as sm
    from jax._src.pallas.mosaic.interpret import thread_map

    return sm.Semaphore.wait.__code__, thread_map._run_jaxpr.__code__


def _wait_in(chain: list[Any], wait_code: Any) -> tuple[Any, int, tuple[int, int, int, str | None]
                                                        ] | bool | None:
    """The semaphore wait a thread's frames are blocked in for good: (semaphore, global core,
    (semaphore id, value, count, source)); False when it waits on one it will get past (or
    takes on a pending DMA); None when it is in no semaphore wait."""
    at = next((i for i, f in enumerate(chain) if f.f_code is wait_code), None)
    if at is None:
        return None
    # Blocked means sleeping on the semaphore's condition; a waiter may also be running a
    # pending DMA it took on (then its callees are the DMA's code, not `threading`'s).
    if not all(f.f_code.co_filename == threading.__file__ for f in chain[:at]):
        return False
    local = chain[at].f_locals
    sem, core, value = local.get("self"), local.get("global_core_id"), local.get("value")
    if sem is None or core is None or value is None:
        return False
    core = int(core)
    with sem.cv:
        count, pending = int(sem.count_by_core[core]), len(sem.tasks[core])
    if count >= int(value) or pending:
        return False  # it will get past this wait
    return sem, core, (int(sem.id), int(value), count, _wait_source(local.get("logging_info")))


def _wait_source(info: Any) -> str | None:
    """"file.py:LINE" of the user's wait, from the source info the interpreter passes."""
    from jax._src import source_info_util

    source = getattr(info, "source_info", None)
    if source is None:
        return None
    try:
        frame = source_info_util.user_frame(source.traceback)
    except Exception:
        return None
    return f"{frame.file_name}:{frame.start_line}" if frame is not None else None


def _blocked_state() -> tuple[Any, tuple[Any, ...]] | None:
    """(shared memory, state) when every core still running is blocked for good, else None.

    A running core is a thread inside the interpreter's per-core computation (`thread_map`);
    one in pure XLA compute shows no other Python frame, so "blocked" needs each running core
    to be inside a semaphore wait that cannot pass."""
    wait_code, run_code = _codes()
    waits: dict[int, tuple[int, int, int, str | None]] = {}  # global core -> its wait
    running = 0
    shared = None
    for frame in list(sys._current_frames().values()):
        chain = _chain(frame)
        running += any(f.f_code is run_code for f in chain)
        found = _wait_in(chain, wait_code)
        if found is None:
            continue
        if not isinstance(found, tuple):
            return None  # it will get past its wait
        sem, core, wait = found
        waits[core] = wait
        shared = sem.shared_memory
    if shared is None or (running and len(waits) != running):
        return None  # some core is still computing: it may yet signal
    return shared, (int(shared.clean_up_barrier.n_waiting), tuple(sorted(waits.items())))


def _deadlock(shared: Any, state: tuple[Any, ...]) -> Deadlock:
    finished, waits = state
    per_device = int(shared.num_cores_per_device)
    blocked = {core for core, _ in waits}
    # The other cores of a device whose cores are blocked: none is running, so they finished.
    others = tuple((d, c) for d in sorted({core // per_device for core in blocked})
                   for c in range(per_device) if d * per_device + c not in blocked)
    return Deadlock(
        waits=tuple(BlockedWait(core // per_device, core % per_device, sem, value, count,
                                source)
                    for core, (sem, value, count, source) in waits),
        finished_devices=finished, num_devices=int(shared.num_devices), finished_cores=others)


def semaphore_names(operands: Iterable[Any]) -> dict[int, str]:
    """TPU interpret mode's semaphore id -> the user's name ("scratch[2][0]"), for a
    kernel's semaphore operands (`Operand`s, in order): it allocates their ids from 2000 in
    operand order, one per element, afresh for each launch; ids of `run_scoped` semaphores,
    allocated while the body runs, map to nothing."""
    names: dict[int, str] = {}
    next_id = 2000
    for op in operands:
        if op.scalar_prefetch or "semaphore" not in str(op.memory_space):
            continue
        shape = tuple(int(s) for s in op.shape)
        for i, index in enumerate(itertools.product(*(range(n) for n in shape))):
            names[next_id + i] = f"{op.origin}[{', '.join(map(str, index))}]" if shape \
                else op.origin
        next_id += math.prod(shape)
    return names


@dataclasses.dataclass(frozen=True)
class ThreadState:
    """What one interpreter thread (one simulated core) is doing: "running" (computing, or
    in a wait it will get past), "blocked" (in a semaphore wait no pending DMA or count can
    satisfy now: only a signal from another core can), or "finished" (out of its kernel)."""

    state: Literal["running", "blocked", "finished"]
    wait: BlockedWait | None = None  # the wait it is blocked in


def thread_states(threads: Iterable[int]) -> dict[int, ThreadState]:
    """Thread id -> what that interpreter core thread is doing now (see `ThreadState`)."""
    wait_code, run_code = _codes()
    frames = sys._current_frames()
    states: dict[int, ThreadState] = {}
    for thread in threads:
        frame = frames.get(thread)
        chain = _chain(frame) if frame is not None else []
        if not any(f.f_code is run_code for f in chain):
            states[thread] = ThreadState("finished")
            continue
        found = _wait_in(chain, wait_code)
        if not isinstance(found, tuple):
            states[thread] = ThreadState("running")
            continue
        sem, core, (sem_id, value, count, source) = found
        per_device = int(sem.shared_memory.num_cores_per_device)
        states[thread] = ThreadState("blocked", BlockedWait(
            core // per_device, core % per_device, sem_id, value, count, source))
    return states

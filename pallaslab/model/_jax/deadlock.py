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
import sys
import threading
from typing import Any

POLL = 0.25  # seconds between looks at the interpreter's threads


@dataclasses.dataclass(frozen=True)
class BlockedWait:
    """One core waiting on a semaphore that can never reach the awaited value."""

    device: int
    core: int
    semaphore: int  # the interpreter's semaphore id
    value: int  # the count it waits for
    count: int  # the semaphore's count on that core when the run stopped


@dataclasses.dataclass(frozen=True)
class Deadlock:
    waits: tuple[BlockedWait, ...]
    finished_devices: int  # devices that had finished and waited for the others
    num_devices: int

    @property
    def message(self) -> str:
        blocked = "; ".join(
            f"device {w.device} (core {w.core}) waits on semaphore #{w.semaphore} for a count "
            f"of {w.value}, which stays at {w.count}" for w in self.waits)
        finished = (f"; {self.finished_devices} other device(s) had finished"
                    if self.finished_devices else "")
        return (f"deadlock: every device is blocked and none can signal again: {blocked}"
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
                shared.set_failed(DeadlockError(self.found.message), top_level=False)
                return
            previous = state


def _blocked_state() -> tuple[Any, tuple[Any, ...]] | None:
    """(shared memory, state) when every core still running is blocked for good, else None.

    A running core is a thread inside the interpreter's per-core computation (`thread_map`);
    one in pure XLA compute shows no other Python frame, so "blocked" needs each running core
    to be inside a semaphore wait that cannot pass."""
    from jax._src.pallas.mosaic.interpret import shared_memory as sm
    from jax._src.pallas.mosaic.interpret import thread_map

    wait_code, run_code = sm.Semaphore.wait.__code__, thread_map._run_jaxpr.__code__
    waits: dict[int, tuple[int, int, int]] = {}  # global core -> (semaphore, value, count)
    running = 0
    shared = None
    for frame in list(sys._current_frames().values()):
        chain = []
        f: Any = frame
        while f is not None:
            chain.append(f)
            f = f.f_back
        running += any(f.f_code is run_code for f in chain)
        at = next((i for i, f in enumerate(chain) if f.f_code is wait_code), None)
        if at is None:
            continue
        # Blocked means sleeping on the semaphore's condition; a waiter may also be running a
        # pending DMA it took on (then its callees are the DMA's code, not `threading`'s).
        if not all(f.f_code.co_filename == threading.__file__ for f in chain[:at]):
            return None
        wait = chain[at]
        local = wait.f_locals
        sem, core, value = local.get("self"), local.get("global_core_id"), local.get("value")
        if sem is None or core is None or value is None:
            return None
        core = int(core)
        with sem.cv:
            count, pending = int(sem.count_by_core[core]), len(sem.tasks[core])
        if count >= int(value) or pending:
            return None  # it will get past this wait
        waits[core] = (int(sem.id), int(value), count)
        shared = sem.shared_memory
    if shared is None or (running and len(waits) != running):
        return None  # some core is still computing: it may yet signal
    return shared, (int(shared.clean_up_barrier.n_waiting), tuple(sorted(waits.items())))


def _deadlock(shared: Any, state: tuple[Any, ...]) -> Deadlock:
    finished, waits = state
    per_device = int(shared.num_cores_per_device)
    return Deadlock(
        waits=tuple(BlockedWait(core // per_device, core % per_device, sem, value, count)
                    for core, (sem, value, count) in waits),
        finished_devices=finished, num_devices=int(shared.num_devices))

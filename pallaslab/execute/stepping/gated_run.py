"""What the multi-device stepper (`device_stepper`) and the core stepper (`core_stepper`)
share: the gate at every program start, TPU interpret mode behind it, the worker's stepped runs,
and the notebook's side of a run stepped in the worker."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from pallaslab.execute.executors.tpu_interpret import TpuInterpretExecutor
from pallaslab.execute.result import RunResult
from pallaslab.model.devices import SemaphoreEvent, Transfer

QUIET = 2.0  # seconds without progress after which the devices are taken to be waiting
# (a fallback: blocked and finished devices are read off the interpreter's threads)
ARRIVAL = 30.0  # the same, while some device (core) has not reached its first gate: each
# compiles its own program first, which on a loaded machine takes longer than QUIET

# In the worker: the stepped runs by stepper ("devices", "cores") and key.
SESSIONS: dict[tuple[str, str], Any] = {}


def close_runs(stepper: str | None = None) -> None:
    """Close and forget the worker's stepped runs of `stepper` (None: of every stepper), so
    that one gated interpreted run holds the worker at a time."""
    for at in [at for at in SESSIONS if stepper is None or at[0] == stepper]:
        SESSIONS.pop(at).close()


# --- in the worker ------------------------------------------------------------------------------


class Gate:
    """Each device thread passes its k-th program start only once its allowance is > k: all
    threads' together (lockstep), or one device's alone."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.allowed = 0  # the lockstep allowance
        self.extra: dict[int, int] = {}  # thread -> programs allowed beyond it (one device)
        self.passed: dict[int, int] = {}  # thread -> programs started
        self.waiting: set[int] = set()
        self.stopped = False

    def allowance(self, thread: int) -> int:
        return self.allowed + self.extra.get(thread, 0)

    def enter(self) -> None:
        me = threading.get_ident()
        with self.cv:
            self.waiting.add(me)
            self.cv.notify_all()
            while self.passed.get(me, 0) >= self.allowance(me) and not self.stopped:
                self.cv.wait(0.1)
            self.waiting.discard(me)
            self.passed[me] = self.passed.get(me, 0) + 1

    def advance(self, threads: Sequence[int] | None = None) -> None:
        """One more program for every thread, or for `threads` only."""
        with self.cv:
            if threads is None:
                self.allowed += 1
            for t in threads or ():
                self.extra[t] = self.extra.get(t, 0) + 1
            self.cv.notify_all()

    def stop(self) -> None:
        with self.cv:
            self.stopped = True
            self.cv.notify_all()


class GatedTpuInterpret(TpuInterpretExecutor):
    """TPU interpret mode with a gate at every program start, its record kept in reach."""

    def __init__(self, gate: Gate):
        super().__init__()
        self.gate = gate
        self.recorder: Any = None

    def device_recorder(self, kernels: Sequence[Any]) -> Any:
        self.recorder = super().device_recorder(kernels)
        return self.recorder

    def params(self, recorder: Callable[..., Any] | None = None,
               logging_mode: Any = None) -> Any:
        gate = self.gate

        def gated(token: Any, grid_point: Any, core_id: Any) -> Any:
            gate.enter()
            return recorder(token, grid_point, core_id) if recorder is not None else token

        return super().params(gated, logging_mode)


# --- in the notebook's process ------------------------------------------------------------------


class SteppedRun:
    """The notebook's side of a run stepped in the worker (`DeviceStepper`, and
    `core_stepper.CoreStepper`): its state as of the last reply, and the steps to its end."""

    _key: str
    _state: dict[str, Any]

    def _call(self, request: dict[str, Any], work: dict[str, Any] | None = None) -> None:
        raise NotImplementedError

    def step(self, n: int = 1) -> SteppedRun:
        raise NotImplementedError

    def _advance(self, n: int, **who: int | None) -> None:
        """`n` steps (fewer if the run ends), each of `who` (a device, a core, or all)."""
        for _ in range(n):
            if self.done:
                break
            self._call({"kind": "device-step", "key": self._key, **who})

    @property
    def position(self) -> int:
        """Steps taken (lockstep steps of devices, cores let go)."""
        return int(self._state.get("step", 0))

    def run(self) -> RunResult:
        """Step to the end; the run's result."""
        while not self.done:
            self.step()
        assert self.result is not None
        return self.result

    def close(self) -> None:
        if not self.done:
            self._call({"kind": "device-step", "key": self._key, "close": True})

    @property
    def done(self) -> bool:
        return bool(self._state.get("done"))

    @property
    def result(self) -> RunResult | None:
        """The run's result, once it ended."""
        return self._state.get("result")

    @property
    def transfers(self) -> tuple[Transfer, ...]:
        """The DMAs that have landed so far, in order (`core`: the core that wrote)."""
        return tuple(self._state.get("transfers", ()))

    @property
    def in_flight(self) -> tuple[Transfer, ...]:
        """DMAs sent whose data has not landed yet (`dst_device` -1 where not known)."""
        return tuple(self._state.get("in_flight", ()))

    @property
    def semaphores(self) -> tuple[SemaphoreEvent, ...]:
        """Semaphore signals and completed waits so far (`core`: the core whose count moved)."""
        return tuple(self._state.get("semaphores", ()))


def checked_reply(reply: dict[str, Any], error: type[Exception], what: str) -> dict[str, Any]:
    """A worker's reply to a stepped run, or `error` saying why it is none."""
    if "missing" in reply:
        raise error("the stepped run is gone (its worker process was replaced); make a new "
                    "stepper")
    if reply.get("error") and not (reply.get("done") and reply.get("result")):
        raise error(f"{what}: {reply['error']}")
    return reply

"""Stepping a multi-device kernel in lockstep: every device advances one program at a time.

`pallaslab.step(fn, *args, devices=4)` runs the function under TPU interpret mode in the
worker process for 4 simulated devices, with a gate at every program start (the interpreter's
`grid_point_recorder`, called on each device's thread before each program): a device waits
there until the stepper lets it go. `step()` lets every device run one more program and
returns when all of them are waiting at their next program again (or finished, or blocked:
nothing moves any more). Between steps the DMAs and semaphore operations so far are read from
the interpreter's record, so a ring collective's steps can be watched one by one; the last
step gives the run's result (outputs, findings, the whole record).

This is real execution, paused at program boundaries; in-flight DMAs are the sends whose data
has not landed yet. A deadlock stops the run as it does without stepping (a `deadlock`
finding). The stepper lives in the worker: `close()` (or a new stepper) ends it.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pallaslab.errors import KernelSelectionError, PallasLabError
from pallaslab.execute.data import DEFAULT_SEED
from pallaslab.execute.prepared import prepare
from pallaslab.execute.protocol import Prepared
from pallaslab.execute.result import RunResult
from pallaslab.execute.stepping.gated_run import (
    ARRIVAL,
    QUIET,
    SESSIONS,
    Gate,
    GatedTpuInterpret,
    SteppedRun,
    checked_reply,
    close_runs,
)
from pallaslab.execute.worker import isolation
from pallaslab.execute.worker.running import execute_here
from pallaslab.model.devices import SemaphoreEvent, Transfer

_KEYS = itertools.count()


class DeviceStepError(PallasLabError, RuntimeError):
    """The stepped run could not be opened or advanced (the message says why)."""


# --- in the worker ------------------------------------------------------------------------------


class DeviceStepSession:
    """The stepped run in the worker: a thread running the kernel behind the gate."""

    def __init__(self, prepared: Prepared):
        from pallaslab.model import _jax

        self.kernels = list(prepared.capture)
        self.gate = Gate()
        self.executor = GatedTpuInterpret(self.gate)
        self.result: RunResult | None = None
        self.error: str | None = None
        self._names = {key: origin for k in self.kernels
                       for key, origin in _jax.tpu_interpret_buffers(k).items()}
        self._thread = threading.Thread(target=self._run, args=(prepared,), daemon=True,
                                        name="pallaslab-device-stepper")
        self._thread.start()

    def _run(self, prepared: Prepared) -> None:
        try:
            self.result = execute_here(self.executor, prepared, float("inf"))
        except BaseException as err:
            self.error = f"{type(err).__name__}: {err}"

    def settle(self) -> None:
        """Wait until every device reached its first program, some device waits at its next
        program and every other one is blocked in a semaphore wait only another device's
        signal can end or has finished (read off the interpreter's threads), or the run
        ended; failing that, until nothing moved for `QUIET` seconds (`ARRIVAL` while a device
        has not reached its first program)."""
        import jax

        from pallaslab.model._jax.deadlock import thread_states

        devices = jax.device_count()
        last, since = None, time.monotonic()
        while self._thread.is_alive():
            with self.gate.cv:
                threads = set(self.gate.passed) | self.gate.waiting
                waiting = set(self.gate.waiting)
                started = sum(self.gate.passed.values())
                # waiting for the next program, not still at the one just let through
                ahead = all(self.gate.passed.get(t, 0) >= self.gate.allowance(t)
                            for t in waiting)
            # The user's turn: a device waits at its gate and none computes. (All blocked or
            # finished with none at a gate is a deadlock the watch is about to stop.)
            others = thread_states(threads - waiting)
            # every device at or past its first gate (each compiles its program first)
            arrived = len(threads) >= devices
            if waiting and ahead and arrived and \
                    all(s.state != "running" for s in others.values()):
                return
            recorder = self.executor.recorder
            progress = (started, len(waiting), recorder.lines if recorder is not None else 0)
            if progress != last:
                last, since = progress, time.monotonic()
            elif threads and time.monotonic() - since > (QUIET if arrived else ARRIVAL):
                return
            time.sleep(0.02)

    def state(self) -> dict[str, Any]:
        from pallaslab.model import _jax

        done = not self._thread.is_alive()
        recorder = self.executor.recorder
        record = None
        if recorder is not None:
            record = recorder.record(_jax.remote_destinations(self.kernels,
                                                               recorder.num_devices),
                                     self._names)
        by_thread = recorder.thread_devices() if recorder is not None else {}
        with self.gate.cv:
            passed = dict(self.gate.passed)
            waiting = set(self.gate.waiting)
        programs: dict[int, int] = {}  # device -> programs run (or running)
        for thread, count in passed.items():
            device = by_thread.get(thread)
            if device is not None:
                programs[device] = max(programs.get(device, 0), count)
        result = self.result
        if result is not None:
            result = dataclasses.replace(result, inputs=())
        at_gate = {by_thread[t] for t in waiting if t in by_thread}
        return {"step": self.gate.allowed, "done": done, "programs": programs,
                # devices inside a program: running, or blocked on a semaphore
                "busy": sorted(set(programs) - at_gate) if not done else [],
                "transfers": record.transfers if record else (),
                "in_flight": record.in_flight if record else (),
                "semaphores": record.semaphores if record else (),
                "result": result, "error": self.error,
                "grids": [list(k.grid) for k in self.kernels]}  # as traced here, on N devices

    def devices_by_thread(self) -> dict[int, int]:
        recorder = self.executor.recorder
        return recorder.thread_devices() if recorder is not None else {}

    def close(self) -> None:
        self.gate.stop()


def handle_request(request: Mapping[str, Any], work: Mapping[str, Any] | None) -> Any:
    """The worker's side of "open-device-stepper" (with `work`) and "device-step" for runs
    stepped in lockstep (`pallaslab.execute.stepping.step_requests` routes them here)."""
    key = request["key"]
    if work is not None:
        close_runs("devices")
        try:
            prepared = prepare(work["fn"], work["args"], work["kwargs"])
        except Exception as err:
            return {"error": f"capturing the function failed in the worker process: "
                             f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"}
        session = SESSIONS["devices", key] = DeviceStepSession(prepared)
    else:
        found = SESSIONS.get(("devices", key))
        if found is None:
            return {"missing": True}
        session = found
        if request.get("close"):
            session.close()
            del SESSIONS["devices", key]
            return {"closed": True}
        device = request.get("device")
        with session.gate.cv:
            gated = set(session.gate.passed) | session.gate.waiting
        threads = None if device is None else [
            t for t, d in session.devices_by_thread().items() if d == device and t in gated]
        if threads == []:  # a core thread is known by the device its first program logs
            return {**session.state(), "error": f"device {device}'s threads are not known yet: "
                    "step every device once first (step())"}
        session.gate.advance(threads)
    session.settle()
    return session.state()


# --- in the notebook's process ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DeviceStepSnapshot:
    """A stepped run between two steps (see the `DeviceStepper` properties of the same names)."""

    devices: int
    position: int
    done: bool
    programs: dict[int, int]
    busy: tuple[int, ...]
    transfers: tuple[Transfer, ...]
    in_flight: tuple[Transfer, ...]
    semaphores: tuple[SemaphoreEvent, ...]
    result: RunResult | None
    grids: tuple[tuple[int | None, ...], ...] = ()


class DeviceStepper(SteppedRun):
    """A multi-device kernel stepped in lockstep in the worker for `devices` devices."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any],
                 kwargs: Mapping[str, Any] | None = None, *, devices: int,
                 seed: int = DEFAULT_SEED, timeout: float | None = None,
                 kernel: int | str | None = None):
        if kernel is not None:  # every kernel steps: asking for one would be ignored
            raise KernelSelectionError(
                f"step(..., devices={devices}) steps every kernel of the function together, "
                f"in lockstep on the devices: kernel={kernel!r} selects none; leave it out")
        prepared = prepare(fn, args, kwargs, seed=seed, devices=devices)
        self.devices = devices
        self.kernel = prepared.capture[0] if len(prepared.capture) else None
        self.time_limit = isolation.time_limit(timeout)
        self._key = f"{os.getpid()}-{next(_KEYS)}"
        self._state: dict[str, Any] = {}
        self._call({"kind": "open-device-stepper", "key": self._key},
                   {"fn": prepared.fn, "args": prepared.args, "kwargs": prepared.kwargs})

    def _call(self, request: dict[str, Any], work: dict[str, Any] | None = None) -> None:
        payload = dict(request)
        if work is not None:
            payload = pickle.loads(isolation.encode_request(work, kind="open-device-stepper"))
            payload.update(request)
        done = isolation.call_worker(
            pickle.dumps(payload), self.time_limit, label="stepping on devices",
            running=lambda count, where: "the stepped kernel",
            interrupted=lambda seconds, what: f"stepping interrupted after {seconds:.1f} s",
            devices=self.devices)
        if done.failed is not None or done.timed_out is not None:
            raise DeviceStepError(f"stepping on {self.devices} devices: "
                                  f"{done.failed or done.timed_out}")
        self._state = checked_reply(done.reply, DeviceStepError,
                                    f"stepping on {self.devices} devices")

    def step(self, n: int = 1, *, device: int | None = None) -> DeviceStepper:
        """Let every device (or only `device`, after a first step of all) run `n` more
        programs (or to the end). A device let go alone may block on a semaphore another
        device has yet to signal: it is then `busy`, with its DMAs `in_flight`."""
        self._advance(n, device=device)
        return self

    @property
    def programs(self) -> dict[int, int]:
        """Device -> programs it has run (a blocked device: including the one it is in)."""
        return dict(self._state.get("programs", {}))

    @property
    def busy(self) -> list[int]:
        """Devices inside a program (running, or blocked on a semaphore)."""
        return list(self._state.get("busy", []))

    @property
    def grids(self) -> tuple[tuple[int | None, ...], ...]:
        """Each kernel's grid as traced in the worker, on the N devices (here a shard_map
        kernel may have been captured on this process's one device, with another grid)."""
        return tuple(tuple(g) for g in self._state.get("grids", ()))

    def snapshot(self) -> DeviceStepSnapshot:
        """Where the stepped run is now, in one value (for views)."""
        return DeviceStepSnapshot(
            devices=self.devices, position=self.position, done=self.done,
            programs=self.programs, busy=tuple(self.busy), transfers=self.transfers,
            in_flight=self.in_flight, semaphores=self.semaphores, result=self.result,
            grids=self.grids)

    def __repr__(self) -> str:
        return (f"<DeviceStepper {self.kernel.name if self.kernel else '?'} on {self.devices} "
                f"devices: step {self.position}, {len(self.transfers)} DMAs landed"
                f"{', done' if self.done else ''}>")

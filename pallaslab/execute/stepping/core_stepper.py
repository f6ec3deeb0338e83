"""Stepping a TPU mesh kernel whose cores signal each other, core by core.

Such a kernel's cores cannot run alone (a core waiting for another's signal would wait
forever), so `pallaslab.step(fn, *args)` runs the whole function under TPU interpret mode, its
cores together as the interpreter's threads, behind a gate at every program start (the
interpreter's `grid_point_recorder`, which names the core): a core waits there until the
stepper lets it go. `step(core=c)` lets core c start and run until it finishes or blocks on a
semaphore wait no pending DMA can satisfy (only another core's signal can); `step()` lets the
lowest-numbered core still waiting at its start go. A blocked core resumes by itself as soon
as another core signals it: the gate is at the start of a core's program only. Between steps
each core's state ("waiting" to start, "running", "blocked" with the wait it is in,
"finished") and the DMAs and semaphore signals and waits so far (the interpreter's record,
each event with its core) are read. A step after which no core can ever move again (every
core blocked, or finished) ends the run with the `deadlock` finding, as an unstepped run does;
the last step gives the run's result (outputs, findings, record).

It shares the multi-device stepper's machinery (`gated_run`: the gate, the gated executor,
the worker's stepped runs): the run lives in the executor worker process, so a core that never
ends can be stopped at the time limit. `close()` (or a new stepper) ends it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pallaslab.errors import PallasLabError, UnavailableError
from pallaslab.execute.data import DEFAULT_SEED
from pallaslab.execute.executors.tpu_interpret import TpuInterpretExecutor
from pallaslab.execute.prepared import prepare
from pallaslab.execute.protocol import Prepared
from pallaslab.execute.result import RunResult
from pallaslab.execute.stepping.gated_run import (
    ARRIVAL,
    SESSIONS,
    Gate,
    GatedTpuInterpret,
    SteppedRun,
    checked_reply,
    close_runs,
)
from pallaslab.execute.worker import isolation
from pallaslab.execute.worker.running import execute_here
from pallaslab.model import Kernel, select_kernel
from pallaslab.model.devices import SemaphoreEvent, Transfer
from pallaslab.model.source_names import short_source

_KEYS = itertools.count()
STATES = ("waiting", "running", "blocked", "finished")


class CoreStepError(PallasLabError, RuntimeError):
    """The stepped run could not be opened or advanced (the message says why)."""


def talking_cores(kernel: Kernel) -> str | None:
    """Where a TPU mesh kernel's cores signal each other (a semaphore signal to another core or
    device, a remote DMA): the first such line (or operand), None when they do not."""
    if kernel.kind != "mesh":
        return None
    talking = [op.source or op.semaphore for op in kernel.semaphore_ops if op.device] + \
        [d.source or d.dst for d in kernel.dmas if d.kind == "remote"]
    return talking[0] if talking else None


# --- where the run is (the worker) ---------------------------------------------------------------


class _CoreGate(Gate):
    """The device stepper's gate, knowing each thread's core (the recorder is told it)."""

    def __init__(self) -> None:
        super().__init__()
        self.core_of: dict[int, int] = {}  # thread -> the core it runs
        self.thread_of: dict[int, int] = {}  # core -> its latest thread (this launch's)

    def enter_core(self, core: int) -> None:
        me = threading.get_ident()
        with self.cv:
            self.core_of[me] = core
            self.thread_of[core] = me
        self.enter()

    def at_start(self, thread: int) -> bool:
        """Is `thread` held at its next program start (not just let through)?"""
        return thread in self.waiting and self.passed.get(thread, 0) >= self.allowance(thread)


class _CoreGatedTpuInterpret(GatedTpuInterpret):
    def params(self, recorder: Callable[..., Any] | None = None,
               logging_mode: Any = None) -> Any:
        gate = self.gate
        assert isinstance(gate, _CoreGate)

        def gated(token: Any, grid_point: Any, core_id: Any) -> Any:
            gate.enter_core(int(core_id))
            return recorder(token, grid_point, core_id) if recorder is not None else token

        return TpuInterpretExecutor.params(self, gated, logging_mode)


class CoreStepSession:
    """The stepped run: a thread running the function under tpu-interpret behind the gate."""

    def __init__(self, prepared: Prepared, kernel: int, cores: int):
        from pallaslab.model import _jax
        from pallaslab.model._jax.mesh_runners import mesh_interpret_buffers

        self.kernels = list(prepared.capture)
        self.cores = cores
        self.gate = _CoreGate()
        self.executor = _CoreGatedTpuInterpret(self.gate)
        self.result: RunResult | None = None
        self.error: str | None = None
        self.steps = 0
        self.deadlock: Any = None  # the run's deadlock, once it stopped on one
        self.order: list[int] = []  # the cores let go, in order
        self._names = {key: origin for k in self.kernels
                       for key, origin in (_jax.tpu_interpret_buffers(k) or
                                           mesh_interpret_buffers(k)).items()}
        self._thread = threading.Thread(target=self._run, args=(prepared,), daemon=True,
                                        name="pallaslab-core-stepper")
        self._thread.start()

    def _run(self, prepared: Prepared) -> None:
        from pallaslab.model._jax import deadlock

        before = len(deadlock.FOUND)
        try:
            self.result = execute_here(self.executor, prepared, float("inf"))
        except BaseException as err:
            self.error = f"{type(err).__name__}: {err}"
        found = deadlock.FOUND[before:]
        self.deadlock = found[-1] if found else None

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def core_states(self) -> dict[int, tuple[str, Any]]:
        """Core -> (state, the wait it is blocked in or None)."""
        from pallaslab.model._jax.deadlock import thread_states

        with self.gate.cv:
            threads = dict(self.gate.thread_of)
            held = {core for core, t in threads.items() if self.gate.at_start(t)}
        found = thread_states(t for core, t in threads.items() if core not in held)
        states: dict[int, tuple[str, Any]] = {}
        for core in sorted(threads):
            if core in held:
                states[core] = ("waiting", None)
            else:
                s = found[threads[core]]
                states[core] = (s.state, s.wait)
        return states

    def settle(self) -> None:
        """Wait until no core runs while one still waits to start (the user's turn), or the
        run ended. Every core blocked or finished with none to start: the deadlock watch
        (or the run's end) stops the run, so wait for that. Before every core has reached
        its start, `ARRIVAL` seconds without a new one is taken as all there are (each core
        compiles its program first: on a loaded machine that takes a while)."""
        last, since = -1, time.monotonic()
        while not self.done:
            states = {s for s, _ in self.core_states().values()}
            with self.gate.cv:
                known = len(self.gate.thread_of)
            if known != last:
                last, since = known, time.monotonic()
            arrived = known >= self.cores or (known and time.monotonic() - since > ARRIVAL)
            if arrived and "running" not in states and "waiting" in states:
                return
            time.sleep(0.02)

    def release(self, core: int | None) -> str | None:
        """Let `core` (None: the lowest one waiting) start; why not, when it cannot."""
        states = self.core_states()
        waiting = [c for c, (s, _) in states.items() if s == "waiting"]
        if core is None:
            if not waiting:
                return "no core is waiting to start"
            core = waiting[0]
        elif core not in states:
            known = ", ".join(map(str, sorted(states))) or "none yet"
            return f"core {core} is not a core of the run (cores known: {known})"
        elif core not in waiting:
            state, wait = states[core]
            how = f"{state} ({wait.text})" if wait is not None else state
            return (f"core {core} cannot be let go: it has started and is {how}; a blocked "
                    "core goes on by itself once another core signals it")
        with self.gate.cv:
            thread = self.gate.thread_of[core]
        self.gate.advance([thread])
        self.steps += 1
        self.order.append(core)
        return None

    def state(self) -> dict[str, Any]:
        from pallaslab.model import _jax

        recorder = self.executor.recorder
        record = None
        if recorder is not None:
            record = recorder.record(_jax.remote_destinations(self.kernels,
                                                               recorder.num_devices),
                                     self._names)
        states = {c: (s, self._with_source(w)) for c, (s, w) in self.core_states().items()}
        semaphores = tuple(dataclasses.replace(e, source=self._wait_line(e.semaphore))
                           if e.kind == "wait" and e.source is None else e
                           for e in (record.semaphores if record else ()))
        done = self.done
        result = self.result
        if result is not None:
            result = dataclasses.replace(result, inputs=())
        if done:  # every core is out: finished, but those a deadlock left blocked
            blocked = {w.core: w for w in self.deadlock.waits} if self.deadlock else {}
            states = {c: ("blocked", self._with_source(blocked[c])) if c in blocked else
                      ("finished", None) for c in states}
        return {"step": self.steps, "done": done, "order": list(self.order),
                "cores": {c: s for c, (s, _) in states.items()},
                "waits": {c: w for c, (s, w) in states.items() if w is not None},
                "transfers": record.transfers if record else (),
                "in_flight": record.in_flight if record else (),
                "semaphores": semaphores,
                "semaphore_names": {i: o for (space, i), o in self._names.items()
                                    if space == "semaphore"},
                "result": result, "error": self.error}

    def _wait_line(self, semaphore: int) -> str | None:
        """The kernel's one `pl.semaphore_wait` line on this semaphore (the interpreter logs
        none for it), None when there is not exactly one."""
        origin = self._names.get(("semaphore", semaphore))
        if origin and origin.count("[") > 1:  # an element of an array: the array's waits
            origin = origin.rsplit("[", 1)[0]
        lines = {op.source for k in self.kernels for op in k.semaphore_ops
                 if op.kind == "wait" and op.semaphore == origin and op.source}
        return lines.pop() if len(lines) == 1 else None

    def _with_source(self, wait: Any) -> Any:
        if wait is None or wait.source is not None:
            return wait
        return dataclasses.replace(wait, source=self._wait_line(wait.semaphore))

    def close(self) -> None:
        self.gate.stop()


def handle_request(request: Mapping[str, Any], work: Mapping[str, Any] | None) -> Any:
    """The worker's side of the core stepper's requests ("open-device-stepper" with `work`,
    "device-step"; each with "stepper": "cores")."""
    key = request["key"]
    if work is not None:
        close_runs()  # one gated interpreted run at a time
        try:
            prepared = prepare(work["fn"], work["args"], work["kwargs"])
        except Exception as err:
            return {"error": f"capturing the function failed: {type(err).__name__}: "
                             f"{(str(err).splitlines() or [''])[0]}"}
        session = CoreStepSession(prepared, work["kernel"], work["cores"])
        SESSIONS["cores", key] = session
        session.settle()
        return session.state()
    found = SESSIONS.get(("cores", key))
    if found is None:
        return {"missing": True}
    session = found
    if request.get("close"):
        session.close()
        del SESSIONS["cores", key]
        return {"closed": True}
    why = session.release(request.get("core"))
    if why is not None:
        return {**session.state(), "refused": why}
    session.settle()
    return session.state()


# --- in the notebook's process -------------------------------------------------------------------


class CoreStepper(SteppedRun):
    """A TPU mesh kernel whose cores signal each other, stepped core by core under TPU
    interpret mode (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any],
                 kwargs: Mapping[str, Any] | None = None, *, kernel: int | str = 0,
                 seed: int = DEFAULT_SEED, timeout: float | None = None,
                 prepared: Prepared | None = None):
        prepared = prepared or prepare(fn, args, kwargs, seed=seed)
        self.kernel: Kernel = select_kernel(prepared.capture, kernel)
        if (why := TpuInterpretExecutor().cannot_run(prepared)) is not None:
            raise UnavailableError(
                f"mesh kernel {self.kernel.name} cannot be stepped: its cores signal each "
                f"other, so they must run together under tpu-interpret, which cannot run "
                f"it: {why}")
        mesh = self.kernel.mesh
        self.programs = math.prod(s for _, s in mesh.axes) if mesh is not None else 1
        self.time_limit = isolation.time_limit(timeout)
        self.notes: list[str] = [
            f"mesh kernel {self.kernel.name}: its {self.programs} cores signal each other, so "
            "they run together under TPU interpret mode (as threads), each held at its start "
            "until stepped: step(core=c) lets core c run until it finishes or blocks on a "
            "semaphore wait; a blocked core goes on once another core signals it"]
        others = [k.name for k in prepared.capture if k.index != self.kernel.index]
        if others:
            self.notes.append(f"the function's other kernels ({', '.join(others)}) are gated "
                              "too: each of their programs is one step of its core")
        self._key = f"{os.getpid()}-{next(_KEYS)}"
        self._state: dict[str, Any] = {}
        self._local = False
        work = {"fn": prepared.fn, "args": prepared.args, "kwargs": prepared.kwargs,
                "kernel": self.kernel.index, "cores": self.programs}
        try:
            payload = pickle.loads(isolation.encode_request(work, kind="open-device-stepper"))
        except Exception as err:
            self._local = True
            self.notes.append(f"the cores run in this process ({isolation.why_not_sent(err)})"
                              ": no time limit is enforced, and only a restart of the Python "
                              "kernel stops a core that never ends")
            self._call({"key": self._key}, work)
            return
        payload.update({"key": self._key, "stepper": "cores"})
        self._call(payload)

    def _call(self, request: dict[str, Any], work: dict[str, Any] | None = None) -> None:
        if self._local:
            reply = handle_request(request, work)
        else:
            done = isolation.call_worker(
                pickle.dumps({**request, "stepper": "cores"}), self.time_limit,
                label="stepping cores", running=lambda count, where: "the stepped kernel",
                interrupted=lambda seconds, what: f"stepping interrupted after {seconds:.1f} s")
            if done.failed is not None or done.timed_out is not None:
                raise CoreStepError(f"stepping the cores of {self.kernel.name}: "
                                    f"{done.failed or done.timed_out}")
            reply = done.reply
        checked_reply(reply, CoreStepError, f"stepping the cores of {self.kernel.name}")
        if "closed" not in reply:
            self._state = reply
        if why := reply.get("refused"):
            raise CoreStepError(f"step(core=...) of {self.kernel.name}: {why}")

    def step(self, n: int = 1, *, core: int | None = None) -> CoreStepper:
        """Let `n` more cores start, one after the other, each running until it finishes or
        blocks: `core`, or the lowest-numbered core still waiting to start."""
        self._advance(n, core=core)
        return self

    @property
    def order(self) -> list[int]:
        """The cores let go, in order."""
        return list(self._state.get("order", []))


    @property
    def cores(self) -> dict[int, str]:
        """Core -> "waiting" (to start), "running", "blocked" (on a semaphore wait) or
        "finished"."""
        return dict(self._state.get("cores", {}))

    @property
    def waits(self) -> dict[int, Any]:
        """Blocked core -> the wait it is in (`BlockedWait`: semaphore, value, count)."""
        return dict(self._state.get("waits", {}))

    def with_state(self, state: str) -> list[int]:
        return [c for c, s in self.cores.items() if s == state]

    @property
    def findings(self) -> tuple[Any, ...]:
        return self.result.findings if self.result is not None else ()

    def outputs(self) -> tuple[Any, ...]:
        """The kernel's outputs once the run ended (a run that stopped has none)."""
        result = self.result
        return tuple(result.outputs) if result is not None and result.outputs else ()

    def describe(self) -> str:
        """One line per core, then the semaphore signals and waits so far."""
        lines = [repr(self)]
        waits = self.waits
        for core, state in sorted(self.cores.items()):
            wait = waits.get(core)
            lines.append(f"  core {core}: {state}" + (f", {wait.text}" if wait else ""))
        for e in self.semaphores:
            if not _dma_event(e, self.transfers):
                lines.append(f"  {self.event_text(e)}")
        if self.result is not None:
            lines.append(f"  result: {self.result.status}"
                         + (f" ({self.result.error})" if self.result.error else ""))
        return "\n".join(lines)

    def semaphore_name(self, semaphore: int) -> str:
        origin = self._state.get("semaphore_names", {}).get(semaphore)
        return f"{origin} (semaphore #{semaphore})" if origin else f"semaphore #{semaphore}"

    def event_text(self, e: SemaphoreEvent) -> str:
        """"core 0 signalled scratch[3] (semaphore #2001) of core 1 by 1 at file.py:LINE"."""
        where = f" at {short_source(e.source)}" if e.source else ""
        name = self.semaphore_name(e.semaphore)
        if e.kind == "signal":
            target = f" of core {e.core}" if e.core is not None and e.core != e.by_core \
                else ""
            return f"core {e.by_core} signalled {name}{target} by {e.amount}{where}"
        return f"core {e.by_core} waited on {name} for {e.amount}{where}"

    def __repr__(self) -> str:
        cores = ", ".join(f"core {c} {s}" for c, s in sorted(self.cores.items()))
        return (f"<CoreStepper {self.kernel.name} on {self.programs} cores: step "
                f"{self.position}; {cores or 'no core started yet'}"
                f"{', done' if self.done else ''}>")


def _dma_event(event: SemaphoreEvent, transfers: Sequence[Transfer]) -> bool:
    """Is this semaphore event a DMA's (its signal carries the copy's bytes)?"""
    return any(t.source == event.source and event.source is not None for t in transfers)

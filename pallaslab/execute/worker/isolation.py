"""Runs executors in a worker process, so a time limit or Ctrl-C can always stop them.

A compiled XLA loop (a program that spins inside `interpret=True`) cannot be interrupted
from Python inside the process that runs it. So interpreters run in a worker process of our
own (`python -m pallaslab.execute.worker.main`, in its own session so a terminal's Ctrl-C reaches
only us): the user's function, its concrete arguments and the executor travel there with
cloudpickle (functions defined in a notebook or a case file by value), the worker captures
and runs them, and sends the `RunResult` back. While it runs, the worker publishes the
program it is in to a small shared file; at the time limit, or on Ctrl-C, we kill the worker
and say which program was running. The worker ends by itself when this process dies
(`_worker.follow_parent`), and the CLI kills it on SIGTERM and SIGHUP. The worker is reused
between runs (its JAX stays warm) and replaced after a kill, its files removed. The stepper
sends its programs to the same worker one at a time (`pallaslab.execute.stepping.stepper`); executor
runs and stepper programs share one wait loop, `call_worker`, which polls the worker, the
clock and Ctrl-C.

What cannot travel (a function closing over something unpicklable, a lone captured
`Kernel`) runs in this process instead, where the time limit is checked at each program
start; the result's notes say so. The `device` executor always runs here: an accelerator
belongs to the process that opened it.

Time limit: `timeout=` seconds, else $PALLASLAB_TIMEOUT, else `DEFAULT_TIMEOUT` (300 s);
`math.inf` turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import math
import os
import pickle
import re
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np

from pallaslab import settings
from pallaslab.errors import PallasLabError
from pallaslab.execute.executors import capabilities
from pallaslab.execute.registry import spec_for
from pallaslab.execute.result import RunResult
from pallaslab.execute.worker import monitor as monitor_module
from pallaslab.execute.worker.monitor import describe_program, progress
from pallaslab.execute.worker.running import execute_here
from pallaslab.execute.worker.worker_request import FramedCall, encode_frames, why_not_sent
from pallaslab.execute.worker.worker_request import encode_request as encode_request  # for callers
from pallaslab.model.source_names import short_source
from pallaslab.util import memory_maps, worker_process

if TYPE_CHECKING:
    from pallaslab.execute.protocol import Executor, Prepared

DEFAULT_TIMEOUT = 300.0  # seconds: a few minutes, enough for tpu-interpret on a big grid
WORKER_START_TIMEOUT = 180.0  # importing JAX on a loaded 2-core machine can be slow
POLL = 0.1  # seconds between checks of the worker, the clock and Ctrl-C


class TimeoutValueError(PallasLabError, ValueError):
    """A time limit that is not a positive number of seconds."""


def time_limit(timeout: float | None) -> float:
    """The run's time limit in seconds (`math.inf`: none)."""
    if timeout is None:
        timeout = settings.timeout()  # checked like --timeout: a SettingError if bad
        if timeout is None:
            return DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            math.isnan(timeout) or timeout <= 0:
        raise TimeoutValueError(f"timeout={timeout!r}: a time limit is a positive number of "
                                "seconds (math.inf for none)")
    return float(timeout)


def _own_devices() -> int:
    import jax

    return jax.device_count()


def run_isolated(executor: Executor, prepared: Prepared, limit: float) -> RunResult:
    """Run in the worker when the work can travel there, else in this process."""
    devices = prepared.devices
    if not spec_for(executor).isolated and devices is None:
        return execute_here(executor, prepared, limit)
    try:
        request = encode_frames({"executor": executor, "fn": prepared.fn,
                                  "args": prepared.args, "kwargs": prepared.kwargs,
                                  "devices": devices,
                                  **capabilities.retrace_context(prepared.capture)})
    except Exception as err:
        if devices is not None and devices != _own_devices():  # its own count differs
            return RunResult(executor.name, None, prepared.output_info, 0.0, 0.0,
                             inputs=_inputs(prepared), unavailable=(
                                 f"devices={devices} runs the function in a worker process "
                                 f"with {devices} CPU devices, and it cannot be sent there "
                                 f"({why_not_sent(err)})"))
        result = execute_here(executor, prepared, limit)
        here = "this process, which has the devices asked for" if devices is not None \
            else "the notebook's process"
        note = f"ran in {here} ({why_not_sent(err)}): the time limit is checked between " \
               "programs only"
        return dataclasses.replace(result, notes=(*result.notes, note), in_process=note)
    name = executor.name
    kernels = list(prepared.capture)
    total = _total(prepared)
    bar: Any = None

    def watch(seconds: float, count: int) -> None:
        nonlocal bar
        if bar is None and seconds > monitor_module.PROGRESS_DELAY and total:
            bar = progress(total, name)
        if bar is not None and count > bar.n:
            bar.update(min(count, total or count) - bar.n)

    def call() -> Exchange:
        return call_worker(
            request, limit, label=name,
            running=lambda count, where: describe_program(kernels, where, count),
            interrupted=lambda seconds, what: (f"{name} run interrupted after {seconds:.1f} s, "
                                               f"while running {what}"),
            watch=watch, devices=devices)

    retried = None
    try:
        done = call()
        if (broken := _broken_jit(done)) is not None:
            # XLA's compiler in that worker no longer loads what it compiles (it fails every
            # later run too): a fresh worker runs it once more, and the run says so.
            workers_for(devices).close()
            retried = (f"re-ran in a fresh worker: the first one's XLA compiler failed "
                       f"({broken})")
            done = call()
    finally:
        if bar is not None:
            bar.close()
    if retried is not None:
        done = _noted(done, retried)
    if done.failed is not None:
        return _failed(name, prepared, done.failed)
    if done.timed_out is not None:
        return RunResult(name, None, prepared.output_info, done.seconds, 0.0,
                         inputs=_inputs(prepared),
                         timed_out=f"{name} stopped by its time limit of {limit:g} s, "
                                   f"while running {done.timed_out}")
    if isinstance(done.reply, dict):  # the worker could not rebuild or run the request
        return dataclasses.replace(_failed(name, prepared, done.reply["error"]),
                                   worker_refused=True)
    return _with_user_sources(dataclasses.replace(done.reply, inputs=_inputs(prepared)),
                              prepared)


_DYNAMIC = re.compile(r"<dynamic-code>:(\d+)")


def _with_user_sources(result: RunResult, prepared: Prepared) -> RunResult:
    """Functions sent by value (defined in a notebook or a case file) run in the worker as
    cloudpickle rebuilds them, named "<dynamic-code>": put back the user's file where this
    process's capture knows a source line of that number."""
    known: dict[str, set[str]] = {}
    for k in prepared.capture:
        for source in (k.source, k.call_site, *(d.source for d in k.dmas),
                       *(op.source for op in k.semaphore_ops)):
            if source:
                known.setdefault(source.rsplit(":", 1)[-1], set()).add(source)

    def fix(text: str | None, shown: bool = False) -> str | None:
        """`shown`: text the user reads, where the line is named as every view names it."""
        if text is None or "<dynamic-code>" not in text:
            return text

        def user_line(m: re.Match[str]) -> str:
            if len(known.get(m[1], ())) != 1:
                return m[0]
            source = next(iter(known[m[1]]))
            return short_source(source) if shown else source
        return _DYNAMIC.sub(user_line, text)

    record = result.device_record
    if record is not None:
        record = dataclasses.replace(
            record, transfers=tuple(dataclasses.replace(t, source=fix(t.source))
                                    for t in record.transfers),
            semaphores=tuple(dataclasses.replace(e, source=fix(e.source))
                             for e in record.semaphores))
    findings = tuple(dataclasses.replace(f, message=fix(f.message, shown=True) or "")
                     for f in result.findings)
    return dataclasses.replace(result, device_record=record, findings=findings,
                               error=fix(result.error, shown=True),
                               unavailable=fix(result.unavailable, shown=True))


class _Worker:
    """One worker process and its channel; `devices`: how many CPU devices its JAX has (None:
    as this process's environment says)."""

    def __init__(self, devices: int | None = None) -> None:
        xla_flags = None if devices is None else \
            with_host_device_count(os.environ.get("XLA_FLAGS", ""), devices)
        env = worker_process.worker_environment(xla_flags)
        # The one the `pallaslab` command started while parsing (its start overlapped ours).
        launched = (worker_process.take_early(env) if devices is None else None) or \
            worker_process.launch(env)
        self.proc, self._log = launched.proc, launched.log
        self.log_path, self.status_path = launched.log_path, launched.status_path
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.send_conn = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv_conn = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.ready = False
        self.args_tokens: set[str] = set()  # arguments this worker was sent (`FramedCall`)
        self.last_words: str | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def status(self) -> tuple[int, tuple[int, tuple[int, ...] | None, int] | None]:
        try:
            slot = np.fromfile(self.status_path, np.int64)
        except OSError:
            return 0, None
        count, kernel, launch, rank = (int(v) for v in slot[:4])
        if count == 0:
            return 0, None
        program = tuple(int(v) for v in slot[4:4 + rank]) if rank >= 0 else None
        return count, (kernel, program, launch)

    def reset_status(self) -> None:
        with open(self.status_path, "r+b") as slot:  # in place: the worker maps the file
            slot.write(bytes(8 * worker_process.STATUS_WORDS))

    def log_tail(self, lines: int = 6) -> str:
        if self.last_words is not None:  # killed: its log is gone, its tail kept
            return self.last_words
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        for conn in (self.send_conn, self.recv_conn):
            with contextlib.suppress(OSError):
                conn.close()
        with contextlib.suppress(OSError):
            self._log.close()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        # Its files go with it: a long session replaces many workers.
        if self.last_words is None:
            self.last_words = self.log_tail()
        for path in (self.log_path, self.status_path):
            with contextlib.suppress(OSError):
                path.unlink()


@dataclasses.dataclass(frozen=True)
class Exchange:
    """How one request to the worker ended: exactly one of `reply`, `failed`, `timed_out`
    says what happened (a Ctrl-C raises instead)."""

    seconds: float
    reply: Any = None  # the worker's answer, unpickled
    failed: str | None = None  # the worker did not start, died or broke the channel: why
    timed_out: str | None = None  # the time limit passed: what was running then
    started: bool = True  # False: no worker could be started (`failed` says why)


def with_host_device_count(flags: str, devices: int) -> str:
    """XLA_FLAGS with the CPU backend's device count set to `devices`."""
    kept = [f for f in flags.split() if not f.startswith(_DEVICE_COUNT_FLAG)]
    return " ".join([*kept, f"{_DEVICE_COUNT_FLAG}={devices}"])


_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


class _Workers:
    """The process's one warm worker (started on first use, replaced when killed), for one
    device count."""

    def __init__(self, devices: int | None = None) -> None:
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        self.devices = devices

    def call(self, request: bytes | FramedCall, limit: float, *, label: str,
             running: Callable[[int, Any], str], interrupted: Callable[[float, str], str],
             cancelled: Callable[[], bool] = lambda: False,
             watch: Callable[[float, int], None] | None = None) -> Exchange:
        """Send `request` and wait for the answer, polling the worker, the clock and Ctrl-C
        every `POLL` seconds. At the time limit, or on Ctrl-C (a KeyboardInterrupt, or
        `cancelled()` turning true), the worker is killed: it is replaced on the next call.
        A `FramedCall`'s arguments stay behind when this worker was sent them already under
        their token (sent again if it no longer keeps them).

        `running(count, where)` words what was running from the worker's status (programs
        started, (kernel, program, launch)); `interrupted(seconds, what)` is the message of
        the KeyboardInterrupt raised on Ctrl-C; `watch(seconds, count)` sees every poll."""
        with self._lock:  # one request at a time per worker
            worker = self._ready_worker()
            if isinstance(worker, str):
                return Exchange(0.0, failed=worker, started=False)
            if watch is not None:
                worker.reset_status()
            started = time.monotonic()
            if not isinstance(request, FramedCall):
                done = self._exchange(worker, (request,), started, limit, label, running,
                                      interrupted, cancelled, watch)
                self._retire_if_worn(worker)
                return done
            token = request.args_token
            kept = token is not None and token in worker.args_tokens
            done = self._exchange(worker, request.frames(send_args=not kept), started, limit,
                                  label, running, interrupted, cancelled, watch)
            if kept and isinstance(done.reply, dict) and done.reply.get("resend-args"):
                worker.args_tokens.discard(token)
                done = self._exchange(worker, request.frames(), started, limit, label, running,
                                      interrupted, cancelled, watch)
            if token is not None and done.reply is not None:
                worker.args_tokens.add(token)
            self._retire_if_worn(worker)
            return done

    def _retire_if_worn(self, worker: _Worker) -> None:
        """A worker near the limit on memory mappings (every executable it compiled holds
        some) is replaced before XLA fails to load what it compiles: the next call starts a
        fresh one."""
        if self._worker is worker and memory_maps.nearly_full(worker.proc.pid):
            self._discard(worker)

    def _exchange(self, worker: _Worker, frames: tuple[bytes, ...], started: float,
                  limit: float, label: str, running: Callable[[int, Any], str],
                  interrupted: Callable[[float, str], str], cancelled: Callable[[], bool],
                  watch: Callable[[float, int], None] | None) -> Exchange:
        try:
            for frame in frames:
                worker.send_conn.send_bytes(frame)
            while not worker.recv_conn.poll(POLL):
                seconds = time.monotonic() - started
                if cancelled():
                    raise KeyboardInterrupt
                if not worker.alive():
                    self._discard(worker)
                    return Exchange(seconds, failed=_death(worker, label))
                if seconds > limit:
                    what = running(*worker.status())
                    self._discard(worker)
                    return Exchange(seconds, timed_out=what)
                if watch is not None:
                    watch(seconds, worker.status()[0])
            data = worker.recv_conn.recv_bytes()
        except KeyboardInterrupt:
            seconds = time.monotonic() - started
            what = running(*worker.status())
            self._discard(worker)
            raise KeyboardInterrupt(interrupted(seconds, what)) from None
        except (EOFError, OSError):
            self._discard(worker)
            return Exchange(time.monotonic() - started, failed=_death(worker, label))
        return Exchange(time.monotonic() - started, reply=pickle.loads(data))

    def _ready_worker(self) -> _Worker | str:
        worker = self._worker
        if worker is not None and worker.alive():
            return worker
        if worker is not None:  # died between requests (killed, out of memory): tidy up
            self._discard(worker)
        worker = _Worker(self.devices)
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        try:
            while not worker.recv_conn.poll(POLL):
                if not worker.alive() or time.monotonic() > deadline:
                    tail = worker.log_tail()
                    worker.kill()
                    return "the executor worker process did not start" + \
                        (f": {tail}" if tail else "")
            worker.recv_conn.recv_bytes()  # "ready"
        except KeyboardInterrupt:
            worker.kill()
            raise
        self._worker = worker
        return worker

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        if self._worker is worker:
            self._worker = None

    def close(self) -> None:
        # Read once: a signal's backstop thread and the main thread may both close.
        worker = self._worker
        if worker is not None:
            self._discard(worker)


_WORKERS = _Workers()
# Workers simulating N devices (`devices=N`), one per N, kept warm like the default one.
_DEVICE_WORKERS: dict[int, _Workers] = {}
atexit.register(lambda: shutdown_worker())


def workers_for(devices: int | None) -> _Workers:
    if devices is None:
        return _WORKERS
    return _DEVICE_WORKERS.setdefault(devices, _Workers(devices))


def call_worker(request: bytes | FramedCall, limit: float, *, label: str,
                running: Callable[[int, Any], str], interrupted: Callable[[float, str], str],
                cancelled: Callable[[], bool] = lambda: False,
                watch: Callable[[float, int], None] | None = None,
                devices: int | None = None) -> Exchange:
    """One request to the warm worker (with `devices` simulated CPU devices, when given),
    within `limit` seconds (see `_Workers.call`)."""
    return workers_for(devices).call(request, limit, label=label, running=running,
                                     interrupted=interrupted, cancelled=cancelled, watch=watch)


def prewarm_worker() -> None:
    """Start the worker in the background, so a notebook's first run finds JAX warm there
    (starting it costs a few seconds; a run that comes first simply waits for it)."""
    def start() -> None:
        with _WORKERS._lock:
            _WORKERS._ready_worker()

    threading.Thread(target=start, name="pallaslab-worker-start", daemon=True).start()


def shutdown_worker() -> None:
    """Stop the warm workers (they are also stopped when this process exits)."""
    for workers in (_WORKERS, *_DEVICE_WORKERS.values()):
        workers.close()


def _total(prepared: Prepared) -> int | None:
    from pallaslab.execute.worker.monitor import total_programs

    return total_programs(list(prepared.capture))


def _inputs(prepared: Prepared) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(v) for v in prepared.flat_args)


# XLA's CPU compiler failing to load the code it just compiled: the worker's JIT is broken
# (seen when the worker ran out of memory mappings: `_retire_if_worn`), not the kernel.
_BROKEN_JIT = "Failed to materialize symbols"


def _broken_jit(done: Exchange) -> str | None:
    """The first line of a run's error when XLA's JIT in the worker is broken, else None."""
    error = done.reply.error if isinstance(done.reply, RunResult) else done.failed
    if not error or _BROKEN_JIT not in error:
        return None
    return next(line for line in error.splitlines() if _BROKEN_JIT in line).strip()[:200]


def _noted(done: Exchange, note: str) -> Exchange:
    if not isinstance(done.reply, RunResult):
        return done
    return dataclasses.replace(done, reply=dataclasses.replace(
        done.reply, notes=(*done.reply.notes, note)))


def _failed(name: str, prepared: Prepared, error: str) -> RunResult:
    return RunResult(name, None, prepared.output_info, 0.0, 0.0, error=error,
                     inputs=_inputs(prepared))


def _death(worker: _Worker, name: str) -> str:
    code = worker.proc.poll()
    how = (f"was killed by signal {-code}" if code is not None and code < 0
           else f"exited with status {code}")
    if code == -signal.SIGKILL:
        how += " (out of memory?)"
    tail = worker.log_tail()
    return f"the {name} worker process {how}" + (f"; its last output:\n{tail}" if tail else "")


"""The executor worker process (see `pallaslab.execute.worker.isolation`).

Protocol over stdin/stdout as `multiprocessing.connection` frames: the worker sends b"ready",
then answers each request, a pickled dict whose "kind" says what to do:

- "execute" (or no kind): {"sys_path", "config", "work": cloudpickle of {"executor", "fn",
  "args", "kwargs"}} -> a pickled `RunResult`, or {"error": str} when the request could not
  be rebuilt or prepared here;
- "open-stepper": the same, with "work" = cloudpickle of {"fn", "args", "kwargs", "kernel"
  (index in the capture), "runner" (a key chosen by the parent), "name", "grid"}: captures
  the function and keeps `program_runner(kernel)` under the key -> {"runner": key} or
  {"error": str};
- "run-program": {"runner", "ids", "scalars", "blocks", "scratch"} (numpy) -> {"outputs",
  "scratch"} (numpy), {"missing": True} when this worker has no such runner (it was started
  after the runner was opened, or dropped it), or {"error": str};
- "open-device-stepper" (with "work", "key") and "device-step" ({"key"[, "close"]}): a
  multi-device kernel stepped in lockstep (`pallaslab.execute.stepping.device_stepper`) -> its
  state;
- "compile-cache-stats": {} -> the `CacheStats` of this worker's compiled computations;
  "capture-cache-stats": {} -> {"hits", "misses", "size", "maxsize"} of its captured calls.

An "execute" request may come in frames (`worker_request.FramedCall`): a header with
"frames": N, then N frames (the executor, the call, the arguments). The call's frame and the
arguments key the captured calls kept (`MAX_PREPARED`), so a repeated run skips the trace.
Arguments that cannot change come with a token (kept here under it, the `MAX_PREPARED` most
recent): sent again, they may stay behind ("args_sent" false), and the answer is
{"resend-args": True} when they are no longer kept.

The worker's JAX keeps compiled computations on disk too (JAX's persistent compilation cache,
`pallaslab.util.jax_cache`), so a new worker skips compiles an earlier one did.

The worker ends with its parent (a Jupyter kernel restarted or shut down, a CLI killed): a
thread polls the parent's pid (a parent that dies re-parents us), then removes the parent's
temporary directory, which the parent can no longer remove, and kills the worker's process
group. `PR_SET_PDEATHSIG` is not used: it fires when the parent *thread* that started us
ends, and workers are started from short-lived threads (`prewarm_worker`).

The worker keeps the `MAX_RUNNERS` most recently used stepper runners. File descriptor 1 is
redirected to the log (stderr) so that C-level prints cannot corrupt the channel.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any

PARENT_POLL = 0.2  # seconds between checks that the parent is still alive
MAX_RUNNERS = 8  # stepper runners kept (least recently used dropped first)
MAX_PREPARED = 4  # captured calls kept (least recently used dropped first), with their arrays
_PREPARED: OrderedDict[bytes, Any] = OrderedDict()  # call key -> (the call's work, Prepared)
_CAPTURES = {"hits": 0, "misses": 0}  # of `_PREPARED`
_ARGS: OrderedDict[str, Any] = OrderedDict()  # token -> arguments (those sent with a token)
_RUNNERS: OrderedDict[str, tuple[Any, dict[str, Any]]] = OrderedDict()  # key -> runner, config
_CONFIG: dict[str, Any] = {}  # the JAX options as last set by a request


def main() -> int:
    # A parent may have blocked or ignored these (a CLI's signal handling, a background
    # shell's SIGINT): the worker must stay killable by `kill`.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
    follow_parent(os.getppid(), os.environ.get("PALLASLAB_PARENT_TMPDIR"))
    send = Connection(os.dup(1), readable=False)
    receive = Connection(os.dup(0), writable=False)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdout = sys.stderr  # stray Python prints: to the log as well

    import numpy as np

    from pallaslab.execute.worker import monitor

    status = os.environ.get("PALLASLAB_WORKER_STATUS")
    if status:
        monitor.STATUS_SLOT = np.memmap(status, np.int64, mode="r+")
    from pallaslab.util import jax_cache

    jax_cache.enable()  # before JAX compiles anything: it checks the setting once
    import pallaslab.execute.runs  # noqa: F401 - warm JAX and pallaslab before "ready"

    send.send_bytes(b"ready")
    warm_up()
    while True:
        try:
            data = receive.recv_bytes()
        except (EOFError, OSError):
            return 0
        send.send_bytes(pickle.dumps(handle(data, receive)))


def warm_up() -> None:
    """Trace, lower and run a tiny interpreted Pallas kernel, so that JAX's first-use costs
    (its tracing and lowering machinery, the first compile) are paid while the parent is still
    importing and tracing, not by its first run. Anything failing here is left to that run."""
    import contextlib

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    with contextlib.suppress(Exception):
        x = jnp.ones((8, 128), jnp.float32)
        jax.block_until_ready(pl.pallas_call(
            double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x))


def follow_parent(parent: int, parent_tmpdir: str | None) -> None:
    """End this worker as soon as `parent` is gone (see the module's docstring)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL)
        _end_orphaned(parent_tmpdir)

    threading.Thread(target=watch, name="pallaslab-parent-watch", daemon=True).start()


def _end_orphaned(parent_tmpdir: str | None) -> None:
    from pallaslab.util.tempdir import remove_session_tmpdir

    if parent_tmpdir and os.path.basename(parent_tmpdir).startswith("pallaslab-"):
        shutil.rmtree(parent_tmpdir, ignore_errors=True)
    remove_session_tmpdir()  # our own, if anything made one; atexit will not run
    try:
        if os.getpgrp() == os.getpid():  # we lead our own group (see isolation): all of it
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(1)


def handle(data: bytes, receive: Connection | None = None) -> Any:
    try:
        request = pickle.loads(data)
        # A request in frames (`encode_frames`): the executor, then the call.
        frames = [receive.recv_bytes() for _ in range(request.get("frames", 0))] \
            if receive is not None else []
    except Exception as err:  # pragma: no cover - the parent sends plain pickles
        return {"error": f"the request could not be read: {type(err).__name__}: {err}"}
    if frames:  # [the executor,] the call[, the arguments]
        request["executor_frame"] = frames.pop(0) if request.get("executor_frame") else None
        request["work"] = frames.pop(0)
        request["args_frame"] = frames.pop(0) if request.get("args_sent") else None
    kind = request.get("kind", "execute")
    if kind == "run-program":
        return run_program(request)
    if kind == "compile-cache-stats":
        from pallaslab.execute.worker.running import compile_cache_stats

        return compile_cache_stats()
    if kind == "capture-cache-stats":
        return {**_CAPTURES, "size": len(_PREPARED), "maxsize": MAX_PREPARED}
    if kind == "device-step":
        from pallaslab.execute.stepping.step_requests import handle_request

        return handle_request(request, None)
    try:
        for path in request["sys_path"]:
            if path not in sys.path:
                sys.path.append(path)
        _set_config(request["config"])
        key = _call_key(request) if kind == "execute" else None
        if key is not None and request["args_frame"] is None and key not in _PREPARED \
                and request.get("args_token") not in _ARGS:
            return {"resend-args": True}  # named by their token, no longer kept here
        work = _call(request, key)
        if request.get("executor_frame") is not None:
            work.update(pickle.loads(request["executor_frame"]))
    except Exception as err:
        return {"error": "the function could not be rebuilt in the executor worker process: "
                         f"{type(err).__name__}: {err}"}
    if kind == "open-stepper":
        return open_stepper(work, request["config"])
    if kind == "open-device-stepper":
        from pallaslab.execute.stepping.step_requests import handle_request

        return handle_request(request, work)
    return execute(work, key)


def _call_key(request: dict[str, Any]) -> bytes | None:
    """What the call is, for the capture cache: its frame (fn, kwargs and the tracing context,
    pickled; the executor apart), its arguments (their token, else their frame's hash) and
    the JAX options it runs under. None for a request not in frames (its work holds all)."""
    if request.get("frames") is None:
        return None
    import hashlib

    args = request.get("args_token") or hashlib.sha256(request["args_frame"]).hexdigest()
    return hashlib.sha256(request["work"] + args.encode() + pickle.dumps(sorted(
        (k, repr(v)) for k, v in request["config"].items()))).digest()


def _call(request: dict[str, Any], key: bytes | None) -> dict[str, Any]:
    """The call's work (fn, args, kwargs, ...): as kept with its capture, or unpickled from
    its frames, the arguments from their frame or as kept under their token. A repeated run
    (or an edited kernel run on the same JAX arrays) does not rebuild its arguments."""
    if key is not None and (found := _PREPARED.get(key)) is not None:
        return dict(found[0])
    work = pickle.loads(request["work"])
    token = request.get("args_token")
    if request.get("args_frame") is not None:
        work["args"] = pickle.loads(request["args_frame"])
        if token is not None:
            _ARGS[token] = work["args"]
            while len(_ARGS) > MAX_PREPARED:
                _ARGS.popitem(last=False)
    elif token is not None:
        _ARGS.move_to_end(token)
        work["args"] = _ARGS[token]
    return work


def _prepared(work: dict[str, Any], key: bytes | None) -> Any:
    """The call captured on its arguments: made once per call frame and JAX options, so a
    repeated run (or a second executor of a comparison) skips the trace. A changed kernel,
    argument or option is another frame, another key."""
    from pallaslab.execute.prepared import prepare

    if key is not None and (found := _PREPARED.get(key)) is not None:
        _PREPARED.move_to_end(key)
        _CAPTURES["hits"] += 1
        return found[1]
    _CAPTURES["misses"] += key is not None
    prepared = prepare(work["fn"], work["args"], work["kwargs"], chip=work.get("chip"))
    if key is not None:
        _PREPARED[key] = ({k: v for k, v in work.items() if k != "executor"}, prepared)
        while len(_PREPARED) > MAX_PREPARED:
            _PREPARED.popitem(last=False)
    return prepared


def execute(work: dict[str, Any], key: bytes | None = None) -> Any:
    from pallaslab.execute.executors import capabilities
    from pallaslab.execute.runs import with_unwritten_findings
    from pallaslab.execute.worker.running import execute_here

    executor = work["executor"]
    if (devices := work.get("devices")) is not None:
        import jax

        if jax.device_count() != devices:
            return {"error": f"{executor.name}: the worker process for devices={devices} has "
                             f"{jax.device_count()} devices ($XLA_FLAGS or $JAX_PLATFORMS of "
                             "this environment override the simulated device count)"}
    try:
        # Traced under the abstract mesh or TPU the parent traced under (if any): same chip,
        # same kernels; the captured jaxpr runs outside it.
        with capabilities.retracing(work):
            prepared = _prepared(work, key)
    except Exception as err:
        return {"error": f"{executor.name}: capturing the function failed in the executor "
                         f"worker process: {_one_line(err)}"}
    if work.get("devices") is None and \
            (mismatch := _different_kernels(work, prepared.capture)) is not None:
        return {"error": f"{executor.name}: {mismatch}"}
    mesh = work.get("abstract_mesh")
    with capabilities.retracing({"abstract_mesh": mesh}):  # as the caller runs it
        result = execute_here(executor, prepared, math.inf)
    if work.get("devices") is not None:  # judged on the kernels as captured for N devices
        result = with_unwritten_findings(result, prepared)
    return dataclasses.replace(result, inputs=())  # the parent has them


def _different_kernels(work: dict[str, Any], kernels: Any) -> str | None:
    """Why the kernels captured here are not the parent's (None: they are the same)."""
    from pallaslab.execute.executors import capabilities

    want = work.get("kernels")
    got = capabilities.signature(kernels)
    if want is None or tuple(want) == got:
        return None
    return (f"the executor worker process captured the kernels {list(got)} (name, grid) where "
            f"this process has {list(want)}: the function traces differently there")


def open_stepper(work: dict[str, Any], config: dict[str, Any]) -> Any:
    from pallaslab.execute.executors import capabilities
    from pallaslab.model import _jax, capture

    try:
        chip = {"chip": work["chip"]} if work.get("chip") else {}
        with capabilities.retracing(work):
            kernel = capture(work["fn"], *work["args"], **chip, **work["kwargs"])[work["kernel"]]
        if kernel.name != work["name"] or tuple(kernel.grid) != tuple(work["grid"]):
            return {"error": f"the worker process captured kernel {kernel.name} with grid "
                             f"{kernel.grid} where this process has {work['name']} with grid "
                             f"{tuple(work['grid'])}"}
        runner = _jax.program_runner(kernel)
    except Exception as err:
        return {"error": f"capturing the function failed in the executor worker process: "
                         f"{_one_line(err)}"}
    key = work["runner"]
    _RUNNERS[key] = (runner, dict(config))
    while len(_RUNNERS) > MAX_RUNNERS:
        _RUNNERS.popitem(last=False)
    return {"runner": key}


def run_program(request: dict[str, Any]) -> Any:
    import numpy as np

    found = _RUNNERS.get(request["runner"])
    if found is None:
        return {"missing": True}
    _RUNNERS.move_to_end(request["runner"])
    runner, config = found
    try:
        _set_config(config)
        outs, scratch = runner.run(request["ids"], request["scalars"], request["blocks"],
                                   request["scratch"])
        return {"outputs": [np.asarray(x) for x in outs],
                "scratch": [np.asarray(x) for x in scratch]}
    except Exception as err:
        return {"error": _one_line(err)}


def _one_line(err: BaseException) -> str:
    """The exception's type and first line (JAX appends notes about filtered frames); for an
    error XLA wrapped around a host callback's traceback, the callback's own error line."""
    from pallaslab.errors import error_line
    from pallaslab.execute.executors.diagnostics import short_error

    text = str(err).strip()
    return short_error(text) if "Traceback" in text else error_line(err)


def _set_config(config: dict[str, Any]) -> None:
    import jax

    for name, value in config.items():
        if _CONFIG.get(name, _UNSET) != value:
            jax.config.update(name, value)
            _CONFIG[name] = value


_UNSET = object()


if __name__ == "__main__":
    sys.exit(main())

"""Starting the executor worker process, and starting it early.

The recipe (`launch`) lives here, in a leaf that imports no JAX, so that the `pallaslab`
command can start the worker while it is still parsing its arguments (`start_early`): the
worker's own start (a Python, JAX, pallaslab: a second or more) then overlaps the command's
JAX import and case loading instead of following them. `pallaslab.execute.worker.isolation` adopts
the early worker on first use (`take_early`), if it was started with the environment it would
use now; otherwise the early worker is stopped and a new one started.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from pallaslab.util.tempdir import session_subdir, session_tmpdir

MODULE = "pallaslab.execute.worker.main"
# int64 words of the worker's status slot: the programs started, kernel, launch, rank, then
# up to 12 program ids (`pallaslab.execute.worker.monitor.STATUS_MAX_RANK`).
STATUS_WORDS = 16


@dataclasses.dataclass(frozen=True)
class Launched:
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    log_path: Path
    status_path: Path
    env: dict[str, str]  # the environment it was started with


def worker_environment(xla_flags: str | None = None) -> dict[str, str]:
    """The worker's environment: this process's, interpreters on the CPU unless the user chose
    otherwise, its parent's temporary directory (removed by the worker if we die first), and
    our `sys.path`. `xla_flags`: replaces $XLA_FLAGS (simulated devices: the CPU is forced)."""
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")  # interpreters run on the CPU
    if xla_flags is not None:
        env["JAX_PLATFORMS"] = "cpu"
        env["XLA_FLAGS"] = xla_flags
    env["PALLASLAB_PARENT_TMPDIR"] = str(session_tmpdir())
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def launch(env: dict[str, str]) -> Launched:
    """Start a worker with `env` (and its status file): it answers b"ready" on its stdout
    once JAX and pallaslab are imported."""
    directory = session_subdir("workers")
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    log_path = directory / f"worker-{stamp}.log"
    status_path = directory / f"status-{stamp}.bin"
    status_path.write_bytes(bytes(8 * STATUS_WORDS))
    env = {**env, "PALLASLAB_WORKER_STATUS": str(status_path)}
    log = open(log_path, "wb")  # noqa: SIM115 - closed when the worker is killed
    proc = subprocess.Popen(
        [sys.executable, "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=log, env=env,
        start_new_session=True)  # a terminal's Ctrl-C is ours to handle, not the worker's
    return Launched(proc, log, log_path, status_path, env)


_EARLY: list[Launched] = []
_LOCK = threading.Lock()


def start_early() -> None:
    """Start the default worker now (once per process), for `take_early` to adopt."""
    with _LOCK:
        if not _EARLY:
            _EARLY.append(launch(worker_environment()))
            atexit.register(_stop_unadopted)


# The variables that decide how the worker's JAX and pallaslab run; others may change after the
# early start without mattering (JAX's import sets TF_CPP_MIN_LOG_LEVEL and libtpu's own, which
# the worker's JAX sets alike; a request carries the caller's sys.path).
DECIDING = ("JAX_", "XLA_", "PALLASLAB_", "LIBTPU_INIT_ARGS", "CUDA_VISIBLE_DEVICES")


def deciding(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k.startswith(DECIDING) and k != "PALLASLAB_WORKER_STATUS"}


def take_early(env: dict[str, str]) -> Launched | None:
    """The early worker, if one is running and was started with the deciding variables of
    `env`; None otherwise (a mismatched or dead one is stopped)."""
    with _LOCK:
        early = _EARLY.pop() if _EARLY else None
    if early is None:
        return None
    if early.proc.poll() is None and deciding(early.env) == deciding(env):
        return early
    stop(early)
    return None


def stop(launched: Launched) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(launched.proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        launched.proc.wait(timeout=5)
    for stream in (launched.log, launched.proc.stdin, launched.proc.stdout):
        with contextlib.suppress(OSError):
            if stream is not None:
                stream.close()
    for path in (launched.log_path, launched.status_path):
        with contextlib.suppress(OSError):
            path.unlink()


def _stop_unadopted() -> None:
    with _LOCK:
        left = list(_EARLY)
        _EARLY.clear()
    for early in left:
        stop(early)

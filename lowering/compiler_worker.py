"""The compiler worker processes (libtpu's in `_tpu_worker`, XLA's CUDA plugin in
`_mosaic_gpu_worker`): one JSON request per line on stdin, one JSON response per line on the
file descriptor that was stdout at start. Compilers print from C++ straight to fds 1 and 2, so
both go to a log file in the worker, whose new lines come back with each response.

`serve` is the worker's side, `CompilerWorker` the parent's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pallaslab.errors import UnavailableError

MAX_LOG_LINES = 50


class WorkerDied(UnavailableError):
    """The compiler worker process exited (its last output is in the message)."""


# --- the worker's side ------------------------------------------------------------------------


def serve(compile_one: Callable[[dict[str, Any]], dict[str, Any]],
          noise: Iterable[str] = ()) -> int:
    """Answer requests until stdin closes or {"quit": true}: each response gets the log lines
    the request added ("log"), less those holding a `noise` string."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    log_path = Path(os.environ["PALLASLAB_WORKER_LOG"])
    os.dup2(2, 1)  # C++ prints to fd 1 as well; keep the protocol channel clean
    noise = tuple(noise)
    protocol.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        offset = log_path.stat().st_size if log_path.exists() else 0
        response = compile_one(request)
        response["log"] = new_log_lines(log_path, offset, noise)
        protocol.write(json.dumps(response) + "\n")
    return 0


def new_log_lines(path: Path, offset: int, noise: tuple[str, ...] = ()) -> list[str]:
    if not path.exists():
        return []
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines()
            if line.strip() and not any(n in line for n in noise)][:MAX_LOG_LINES]


_FATAL_LINE = re.compile(r"^F\d{4} ")  # glog's fatal severity


# --- the parent's side ------------------------------------------------------------------------


class CompilerWorker:
    """A worker process running `python -m <module>` with `env`, its files in `directory`
    (removed by `close`); `request` sends one JSON request and waits for the response."""

    def __init__(self, module: str, env: dict[str, str], directory: Path, what: str,
                 cwd: str | None = None) -> None:
        self._dir = directory
        self.what = what  # "the TPU compiler worker (libtpu)"
        self.log_path = directory / "worker.log"
        env = {**env, "PALLASLAB_WORKER_LOG": str(self.log_path)}
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, env=env, text=True, bufsize=1, cwd=cwd)
        self._lock = threading.Lock()
        self._read()  # {"ready": true}

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(payload) + "\n")
            self._proc.stdin.flush()
            return self._read()

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            lines = self.log_path.read_text(errors="replace").splitlines()
            # A failed CHECK's own line ("F... ] Check failed: ...") may sit above the stack
            # trace that follows it: keep it with the tail.
            fatal = [ln for ln in lines[:-15] if _FATAL_LINE.match(ln)][:1]
            tail = fatal + lines[-15:]
            raise WorkerDied(f"{self.what} exited with status {self._proc.returncode}; its "
                             "last output:\n" + "\n".join(tail))
        response: dict[str, Any] = json.loads(line)
        return response

    def close(self) -> None:
        if self.alive():
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write('{"quit": true}\n')
                self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)

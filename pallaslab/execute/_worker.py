"""The executor worker process (see `pallaslab.execute.isolation`).

Protocol over stdin/stdout as `multiprocessing.connection` frames: the worker sends b"ready",
then answers each request (a pickle of {"sys_path", "config", "work": cloudpickle of
{"executor", "fn", "args", "kwargs"}}) with a pickled `RunResult`, or {"error": str} when the
request could not be rebuilt or prepared here. File descriptor 1 is redirected to the log
(stderr) so that C-level prints cannot corrupt the channel.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any


def main() -> int:
    send = Connection(os.dup(1), readable=False)
    receive = Connection(os.dup(0), writable=False)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdout = sys.stderr  # stray Python prints: to the log as well

    import numpy as np

    from pallaslab.execute import monitor

    status = os.environ.get("PALLASLAB_WORKER_STATUS")
    if status:
        monitor.STATUS_SLOT = np.memmap(status, np.int64, mode="r+")
    import pallaslab.execute.executors  # noqa: F401 - warm JAX and pallaslab before "ready"

    send.send_bytes(b"ready")
    while True:
        try:
            data = receive.recv_bytes()
        except (EOFError, OSError):
            return 0
        send.send_bytes(pickle.dumps(handle(data)))


def handle(data: bytes) -> Any:
    import jax

    from pallaslab.execute.executors import execute_here, prepare

    try:
        request = pickle.loads(data)
        for path in request["sys_path"]:
            if path not in sys.path:
                sys.path.append(path)
        for name, value in request["config"].items():
            jax.config.update(name, value)
        work = pickle.loads(request["work"])
    except Exception as err:
        return {"error": "the function could not be rebuilt in the executor worker process: "
                         f"{type(err).__name__}: {err}"}
    executor = work["executor"]
    try:
        prepared = prepare(work["fn"], work["args"], work["kwargs"])
    except Exception as err:
        last = traceback.format_exception_only(err)[-1].strip()
        return {"error": f"{executor.name}: capturing the function failed in the executor "
                         f"worker process: {last}"}
    result = execute_here(executor, prepared, math.inf)
    return dataclasses.replace(result, inputs=())  # the parent has them


if __name__ == "__main__":
    sys.exit(main())

"""A kernel's one-program runner kept in the executor worker process, and the stepper's
errors: a program that failed or ran out of time there."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pallaslab.errors import PallasLabError
from pallaslab.execute.worker import isolation
from pallaslab.execute.worker.monitor import Interruptible


class StepTimeLimitError(PallasLabError, TimeoutError):
    """A program did not finish within the stepper's time limit (it was stopped)."""


class StepFailedError(PallasLabError, RuntimeError):
    """A program could not be run: it raised, or the worker process running it died."""


RUNNER_KEYS = itertools.count()  # keys of the runners the worker keeps


class CannotOpen(Exception):
    """The runner cannot be opened in the worker process (the message says why)."""


class RemoteRunner:
    """A kernel's one-program runner in the worker process (`ProgramRunner.run` there).

    The worker keeps it under a key; a worker started later (after a kill) does not have it
    and says so, and the runner is opened again there before the program runs."""

    def __init__(self, open_request: bytes, key: str, name: str):
        self.open_request = open_request
        self.key = key
        self.name = name

    def run(self, program: tuple[int, ...], ids: np.ndarray, scalars: Sequence[np.ndarray],
            blocks: Sequence[np.ndarray], scratch: Sequence[np.ndarray], limit: float,
            message: Callable[[tuple[int, ...], float | None], str]
            ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        request = pickle.dumps({"kind": "run-program", "runner": self.key, "ids": ids,
                                "scalars": tuple(scalars), "blocks": tuple(blocks),
                                "scratch": tuple(scratch)}, protocol=pickle.HIGHEST_PROTOCOL)
        for _ in range(2):
            reply = self._call(request, program, limit, message)
            if "missing" not in reply:
                break
            self._open(program, limit, message)
        if "error" in reply:
            raise StepFailedError(f"stepping {self.name}: program {program} failed: "
                                  f"{reply['error']}")
        return reply["outputs"], reply["scratch"]

    def _open(self, program: tuple[int, ...], limit: float,
              message: Callable[[tuple[int, ...], float | None], str]) -> None:
        try:
            reply = self._call(self.open_request, program, limit, message, opening=True)
        except StepFailedError as err:
            raise CannotOpen(str(err)) from None
        if "error" in reply:
            raise CannotOpen(f"the worker process could not open it: {reply['error']}")

    def _call(self, request: bytes, program: tuple[int, ...], limit: float,
              message: Callable[[tuple[int, ...], float | None], str],
              opening: bool = False) -> dict[str, Any]:
        with Interruptible() as flag:
            done = isolation.call_worker(
                request, limit, label=f"stepping {self.name}",
                running=lambda count, where: f"program {program}",
                interrupted=lambda seconds, what: message(program, seconds),
                cancelled=lambda: flag.cancelled)
        if not done.started:
            raise CannotOpen(done.failed or "no worker process")
        if done.failed is not None:
            raise StepFailedError(f"stepping {self.name}: program {program} could not run: "
                                  f"{done.failed}")
        if done.timed_out is not None:
            what = message(program, None)
            if opening:
                what = (f"stepping {self.name}: capturing the function in the worker process "
                        f"(to run program {program}) took longer than the time limit of "
                        f"{limit:g} s; raise it with pallaslab.step(..., timeout=SECONDS)")
            raise StepTimeLimitError(what)
        reply = done.reply
        assert isinstance(reply, dict)
        return reply

"""The executor protocol: what every executor is, and the facts it declares about itself.

Implementations import this module (and `pallaslab.execute.worker.running`, their shared helpers);
`pallaslab.execute.registry` imports the implementations and makes them usable by name. So
nothing here knows any particular executor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np

from pallaslab.errors import PallasLabError
from pallaslab.execute.result import OutputInfo, RunResult
from pallaslab.model import Capture, Kernel


class ExecutorError(PallasLabError, ValueError):
    """An executor name or reference that does not fit."""


def runs_anything(kernels: Sequence[Kernel]) -> str | None:
    """The `refusal` of an executor that can run every kernel."""
    return None


@dataclasses.dataclass(frozen=True)
class ExecutorSpec:
    """Everything the rest of pallaslab needs to know about one executor, declared once (as
    the `spec` of its class) and read through `pallaslab.execute.registry`."""

    name: str  # `executor="NAME"`, `--executors NAME,...`: lower case, words joined by "-"
    label: str  # how notes name the mode it runs kernels under ("TPU interpret mode")
    description: str  # one line for the CLI's help and the docs
    # Runs in the killable worker process (False: in the caller's process, e.g. an
    # accelerator, which belongs to the process that opened it).
    isolated: bool = True
    # What an output element no program wrote holds after its run: floats NaN, integers the
    # dtype's "min" or "max". None: it leaves no recognisable fill (not judged for
    # `unwritten-output`).
    integer_fill: Literal["min", "max"] | None = None
    # JAX's interpreter it is, as messages name it when the interpreter lacks a feature or
    # breaks inside its own code; None: not one of JAX's interpreters (its errors are its own).
    interpreter: str | None = None
    # What it can run: why it cannot run these kernels, or None.
    refusal: Callable[[Sequence[Kernel]], str | None] = runs_anything
    # The registry builds it with the comparison's reference function (`reference=`): the
    # reference executor, which a comparison given `reference=` adds.
    takes_reference: bool = False
    # The choice, as data (`pallaslab.execute.executors.choice` reads these, never names).
    # The semantics it interprets kernels under: "hlo" (interpret mode), "tpu" (TPU
    # interpret mode: DMAs in flight, blocking waits, several devices), "gpu" (Mosaic GPU
    # interpret mode); None: not an interpreter (a device, a reference).
    mode: Literal["hlo", "tpu", "gpu"] | None = None
    # Chosen over the others of its mode on a CPU host (the fast everyday default there).
    cpu_preferred: bool = False
    # Where it stands among the interpreters that check interpret mode's results, best
    # first (lowest); None: never chosen as that second executor.
    second_rank: int | None = None


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A function (or lone kernel) captured on concrete arguments, ready to run."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    capture: Capture
    output_info: tuple[OutputInfo, ...]
    # Run on this many simulated CPU devices (a worker process configured for them); None:
    # on this process's devices.
    devices: int | None = None

    @property
    def flat_args(self) -> tuple[Any, ...]:
        return tuple(self.capture.handle.flat_args)


class Executor(Protocol):
    """Runs a prepared function; `spec` says what it is (see `ExecutorSpec`)."""

    name: str
    spec: ExecutorSpec

    def unavailable(self) -> str | None:
        """Why this executor cannot run on this machine (None: it can)."""

    def cannot_run(self, prepared: Prepared) -> str | None:
        """Why this executor cannot run these kernels (None: it can)."""

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        """Run; `deadline` (time.monotonic()) stops the run at the next program start."""


def numpy_values(values: Sequence[Any]) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(v) for v in values)

"""What an executor returns: frozen, numpy-backed, ready for a view to render."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

import numpy as np

from pallaslab.analysis.findings import Finding
from pallaslab.model.devices import DeviceRecord

RunStatus = Literal["ran", "unavailable", "failed", "timed-out"]


@dataclasses.dataclass(frozen=True)
class ProgramPrint:
    """One line a kernel printed with `pl.debug_print`, and the program that printed it."""

    kernel: int | None  # launch index in the capture (None: printed outside any program)
    program: tuple[int, ...] | None  # program ids
    text: str
    launch: int = 0  # which launch of the kernel (a kernel inside `scan` launches repeatedly)


@dataclasses.dataclass(frozen=True)
class OutputInfo:
    """Where a function output comes from: a kernel's output operand, or something else."""

    name: str  # "outputs", "outputs[1]" (kernel origin) or "result[2]" (flat output position)
    kernel: int | None  # the kernel that wrote it directly, if any
    origin: str | None  # that kernel's output origin


@dataclasses.dataclass(frozen=True)
class KernelBatching:
    """How the `vectorized` executor ran one kernel, and the rule that decided."""

    kernel: str
    how: Literal["batched", "scanned", "interpreted", "no-programs"]
    dims: tuple[int, ...] = ()  # the grid dimensions batched (how == "batched")
    rule: str | None = None  # why it is not (fully) batched; None when every dimension is


@dataclasses.dataclass(frozen=True)
class DefaultChoice:
    """How a run with no executor named chose one (`auto`: the fastest that applies)."""

    chose: str  # the executor chosen first
    reason: str | None  # why that one, when not interpret mode (None: the everyday default)
    fallback: str | None = None  # why `chose` could not run, so the result's executor ran


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One execution of a function (or a lone kernel) by one executor."""

    executor: str
    outputs: tuple[np.ndarray, ...] | None  # flat outputs; None when the run failed
    output_info: tuple[OutputInfo, ...]
    wall_time: float  # seconds for the execution proper (compilation excluded)
    compile_time: float  # seconds to trace and compile
    prints: tuple[ProgramPrint, ...] = ()
    findings: tuple[Finding, ...] = ()
    error: str | None = None  # why the run failed (the interpreter's message, shortened)
    unavailable: str | None = None  # why the executor could not run at all
    inputs: tuple[np.ndarray, ...] = ()  # the flat concrete inputs it ran on
    timed_out: str | None = None  # what was running when the time limit stopped the run
    notes: tuple[str, ...] = ()  # how it ran, e.g. "in-process: the time limit is soft"
    # Several devices (tpu-interpret): every DMA between them and every semaphore signal/wait.
    device_record: DeviceRecord | None = None
    # What code reads instead of the notes (which are for people):
    ran_under: str | None = None  # the executor that really ran the kernels, when another
    #   (the `vectorized` executor falling back to an interpreter); None: `executor` itself
    fallback: str | None = None  # why `vectorized` handed the run to `ran_under`
    batching: tuple[KernelBatching, ...] = ()  # how `vectorized` ran each kernel
    default_choice: DefaultChoice | None = None  # set when no executor was named
    in_process: str | None = None  # why it ran in the caller's process, not the worker
    # the worker process could not rebuild or capture the call as the caller did (the
    # caller may run it in its own process instead)
    worker_refused: bool = False

    @property
    def ran_as(self) -> str:
        """The executor whose run gave these results (`ran_under`, else `executor`)."""
        return self.ran_under or self.executor

    @property
    def ok(self) -> bool:
        return self.outputs is not None

    @property
    def status(self) -> RunStatus:
        """"ran", "unavailable" (cannot run here), "failed" (an error) or "timed-out"."""
        if self.unavailable is not None:
            return "unavailable"
        if self.timed_out is not None:
            return "timed-out"
        return "ran" if self.outputs is not None else "failed"

    @property
    def reason(self) -> str | None:
        """Why the run did not produce outputs (None when it ran)."""
        return self.unavailable or self.timed_out or (
            None if self.outputs is not None else self.error or "no outputs")

    def prints_by_program(self, kernel: int = 0) -> Mapping[tuple[int, ...] | None, list[str]]:
        """kernel's printed lines, grouped by program (execution order kept)."""
        out: dict[tuple[int, ...] | None, list[str]] = {}
        for p in self.prints:
            if p.kernel == kernel:
                out.setdefault(p.program, []).append(p.text)
        return out

    def output(self, name: str) -> np.ndarray:
        if self.outputs is None:
            raise ValueError(f"the {self.executor} run failed: {self.error or self.unavailable}")
        for info, value in zip(self.output_info, self.outputs, strict=True):
            if info.name == name:
                return value
        known = ", ".join(i.name for i in self.output_info)
        raise KeyError(f"no output {name!r}; the outputs are: {known}")

"""What an interpreter saw a kernel move and wait for: DMAs (TPU manual copies, Mosaic GPU TMA
copies), semaphore and barrier signals and waits, in the order the interpreter ran them.

This is the contract between the executors that record (TPU manual DMAs in
`execute/transfers_tpu.py`, Mosaic GPU TMA copies and barriers in `execute/transfers_gpu.py`)
and the Pipeline view that draws them. Times are logical: the interpreter's event order, not
hardware time (the hardware's own timeline comes from a profile on a real device).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pallaslab.model import Kernel

TransferKind = Literal[
    "dma",  # TPU async copy (make_async_copy / sync_copy / emit_pipeline's copies)
    "tma",  # Mosaic GPU global <-> shared memory copy
    "remote-dma",  # TPU copy to another device (make_async_remote_copy)
    "signal",  # semaphore signal / barrier arrive
    "wait",  # semaphore or DMA wait / barrier wait
]


@dataclasses.dataclass(frozen=True)
class TransferEvent:
    kind: TransferKind
    lane: str  # who issued it: "core 0", "block (1,)", "warpgroup 1", "device 2"
    program: tuple[int, ...] | None  # grid program / block index, when the kernel has a grid
    label: str  # what the user reads on hover: "x_hbm[0:128] -> buf[0]" or "sem[1] += 1"
    source: str | None = None  # ref names (origins) when the event moves data
    destination: str | None = None
    nbytes: int | None = None
    start: int = 0  # logical clock: the interpreter's event order
    end: int = 0  # >= start; a copy spans from its start to the wait that completes it
    source_line: str | None = None  # "file.py:LINE" of the statement in the kernel


@dataclasses.dataclass(frozen=True)
class TransferRecord:
    kernel: str
    executor: str  # the interpreter that recorded it ("tpu-interpret", "gpu-interpret")
    events: tuple[TransferEvent, ...]
    truncated: bool = False  # the record stopped at its event limit
    note: str | None = None  # what the record leaves out, said plainly

    @property
    def lanes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.lane for e in self.events))


class TransferRecordUnavailable(Exception):
    """The kernel's transfers cannot be recorded; the message says why (shown in the view)."""


Recorder = Callable[[Kernel, Any, Sequence[Any]], TransferRecord]


def record_transfers(kernel: Kernel, fn: Any, args: Sequence[Any]) -> TransferRecord:
    """Run `fn(*args)` under the interpreter that fits `kernel` and record its transfers.

    Raises `TransferRecordUnavailable` when no recorder applies or the run fails."""
    return _recorder_for(kernel)(kernel, fn, args)


def _recorder_for(kernel: Kernel) -> Recorder:
    # Imported on use: each recorder pulls in its interpreter.
    if kernel.backend == "mosaic_gpu":
        from pallaslab.execute.transfers_gpu import record_gpu_transfers

        return record_gpu_transfers
    if kernel.dmas or kernel.semaphore_ops or kernel.pipelines:
        from pallaslab.execute.transfers_tpu import record_tpu_transfers

        return record_tpu_transfers
    raise TransferRecordUnavailable(
        f"kernel {kernel.name!r} issues no DMAs, TMA copies or semaphore operations to record")

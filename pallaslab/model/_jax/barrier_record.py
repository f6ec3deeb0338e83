"""The record of a Mosaic GPU run, read from JAX's Mosaic GPU interpret mode's own log.

With `InterpretGPUParams(logging_mode=LoggingMode.BARRIER)` the interpreter logs, per block
and warpgroup, every barrier phase that completes (at the line of what arrived: a
`barrier_arrive`, or a TMA copy that signals the barrier when its data has landed), every wait
that has to wait, and when it is over, each followed by the user's source line.
`BarrierRecorder` listens to that log (a `logging.Handler`; nothing in JAX is patched) and
turns it into a `DeviceRecord` whose "devices" are the blocks: a completed phase at a TMA
copy's line is that copy (its bytes from the capture), every phase a signal of its barrier,
every finished wait a wait. Copies that signal no barrier, and waits that never had to wait,
leave no line in the log.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from pallaslab.model._jax.log_recorder import LogRecorder
from pallaslab.model.devices import DeviceRecord, SemaphoreEvent, Transfer
from pallaslab.model.kernel import DmaCopy

LOGGER = "jax._src.pallas.mosaic_gpu.interpret.shared_memory"
MAX_LINES = 100_000

_THREAD = re.compile(r"block_id=(\d+), warpgroup_id=(\d+)\): `(\w+)` -- (.*)$")
_COMPLETED = re.compile(r"Barrier (\d+) has completed phase (\d+)")
_FINISHED = re.compile(r"Finished waiting for phase (\d+) of barrier (\d+)")
_SOURCE = re.compile(r"^(\S+?):(\d+):\d+ ")


def logging_mode() -> Any:
    from jax._src.pallas.mosaic.interpret.params import LoggingMode

    return LoggingMode.BARRIER


class BarrierRecorder(LogRecorder):
    """While active (a context manager), collects the GPU interpreter's barrier log."""

    def __init__(self) -> None:
        super().__init__(LOGGER, MAX_LINES)

    def record(self, copies: Mapping[str, DmaCopy], blocks: int) -> DeviceRecord:
        """The record; `copies`: the kernel's TMA copies by source line ("file.py:LINE")."""
        return _parse(self.snapshot(), copies, blocks, self.truncated)


def _parse(lines: list[tuple[int, str]], copies: Mapping[str, DmaCopy], blocks: int,
           truncated: bool) -> DeviceRecord:
    pending: dict[int, tuple[int, str, str]] = {}  # thread -> (block, op, text) awaiting its line
    events: list[tuple[int, str, str, str | None]] = []  # (block, op, text, source)
    for thread, message in lines:
        m = _THREAD.search(message)
        if m is None:
            continue
        block, op, rest = int(m[1]), m[3], m[4]
        if (s := _SOURCE.match(rest)) is not None or rest in ("None", "."):
            if thread in pending:
                b, o, text = pending.pop(thread)
                events.append((b, o, text, f"{s[1]}:{s[2]}" if s else None))
        else:
            pending[thread] = (block, op, rest)
    numbers: dict[str, int] = {}  # the interpreter's barrier ids, numbered as first seen
    started: dict[tuple[int, str], int] = defaultdict(int)
    transfers, semaphores = [], []
    for seq, (block, _, text, source) in enumerate(events):
        if m := _COMPLETED.search(text):
            barrier, phase = numbers.setdefault(m[1], len(numbers)), int(m[2])
            semaphores.append(SemaphoreEvent(seq, "signal", block, barrier, phase, source))
            copy = copies.get(source or "")
            # A TMA copy whose data landed: its barrier's phase. (TMA windows are static in
            # Mosaic GPU; one the model could not size is left out of the transfers.)
            if copy is not None and copy.nbytes is not None:
                transfers.append(Transfer(
                    seq, block, block, f"{copy.src} (gmem)", f"{copy.dst} (smem)",
                    tuple(s or 0 for s in copy.shape), copy.nbytes, source,
                    started[(block, source or "")], copy.dst, None))
                started[(block, source or "")] += 1
        elif m := _FINISHED.search(text):
            barrier = numbers.setdefault(m[2], len(numbers))
            semaphores.append(SemaphoreEvent(seq, "wait", block, barrier, int(m[1]), source))
    return DeviceRecord(blocks, tuple(transfers), tuple(semaphores), truncated)

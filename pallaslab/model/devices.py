"""What a multi-device kernel did, device by device: the record TPU interpret mode keeps of a
run on several (simulated) devices — every DMA as a transfer between devices, every semaphore
signal and completed wait — in the order they happened."""

from __future__ import annotations

import dataclasses
from typing import Literal


@dataclasses.dataclass(frozen=True)
class Transfer:
    """One DMA: `nbytes` from a buffer of `src_device` to a buffer of `dst_device`."""

    seq: int  # position in the run's record (its order)
    src_device: int
    dst_device: int
    src_buffer: str  # "hbm #100" (memory space, the interpreter's buffer id)
    dst_buffer: str
    shape: tuple[int, ...]
    nbytes: int
    source: str | None  # "file.py:LINE" of the copy's start
    step: int  # how many transfers the source device had started from this line before
    # Where it landed: the destination buffer's operand ("outputs", "scratch[0]"), when known,
    # and the region of that (per-device) buffer, [start, stop) per dimension (None: whole).
    dst_origin: str | None = None
    dst_region: tuple[tuple[int, int], ...] | None = None
    # The core (of its device) whose thread ran the copy's write: on one device whose cores
    # signal each other, the core that wrote the destination (None where not known).
    core: int | None = None

    @property
    def remote(self) -> bool:
        return self.src_device != self.dst_device


@dataclasses.dataclass(frozen=True)
class SemaphoreEvent:
    """A semaphore signal, or a wait that completed, on `device` (the one whose count moved)."""

    seq: int
    kind: Literal["signal", "wait"]
    device: int
    semaphore: int  # the interpreter's semaphore id
    amount: int  # signal: the increment; wait: the value waited for
    source: str | None
    # The core (of `device`) whose count moved: the signalled core, or the core that waited
    # (None where not known).
    core: int | None = None
    # The core whose thread ran it: the signalling core (a signal to another core has `core`
    # the signalled one), or the core that waited.
    by_core: int | None = None


@dataclasses.dataclass(frozen=True)
class DeviceRecord:
    num_devices: int
    transfers: tuple[Transfer, ...]
    semaphores: tuple[SemaphoreEvent, ...]
    truncated: bool = False  # the record stopped at its size limit
    # Sent, not landed (a stepped run between steps): `dst_device` -1 where not known.
    in_flight: tuple[Transfer, ...] = ()

    def remote_bytes(self) -> int:
        return sum(t.nbytes for t in self.transfers if t.remote)

    def last_writer(self, device: int, origin: str, index: tuple[int, ...]) -> Transfer | None:
        """The last DMA that wrote element `index` of `origin`'s buffer on `device`."""
        found = None
        for t in self.transfers:
            if t.dst_device == device and t.dst_origin == origin and (
                    t.dst_region is None or all(lo <= i < hi for i, (lo, hi) in
                                                zip(index, t.dst_region, strict=False))):
                found = t
        return found

"""What a device says its kind is while a call is traced for a chip.

Production kernels pick block sizes by the device they run on: JAX's own ragged paged
attention and megablox read `jax.devices()[0].device_kind`, which no abstract mesh answers
(only JAX's `tpu_info` reads the mesh's abstract device). On a host without a TPU the kernel is
told "cpu" and refuses ("TPU version must be 4 or higher") or picks a CPU path. Tracing for a
chip therefore also makes every device report that chip's kind, for the trace alone; and every
trace records whether the kernel itself asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import jax


@dataclasses.dataclass
class DeviceQuestions:
    """The device kinds the traced code read (JAX's own reads are not counted)."""

    kinds_read: list[str] = dataclasses.field(default_factory=list)

    @property
    def asked_kind(self) -> bool:
        return bool(self.kinds_read)


# Modules whose reads are JAX's own bookkeeping, not the kernel choosing by the device.
_JAX_INTERNAL = ("jax._src.", "jaxlib.")


@contextlib.contextmanager
def reported_device_kind(kind: str | None) -> Iterator[DeviceQuestions]:
    """For the `with` block, devices report `kind` as their `device_kind` (their own when None)
    and the traced code's reads are recorded; restored on leaving, error or not. The property
    of the device class is replaced, so `jax.devices()` still returns real devices."""
    device_type = type(jax.devices()[0])
    real = device_type.__dict__["device_kind"]
    questions = DeviceQuestions()

    def device_kind(device: Any) -> str:
        said = kind if kind is not None else real.__get__(device)
        if not sys._getframe(1).f_globals.get("__name__", "").startswith(_JAX_INTERNAL):
            questions.kinds_read.append(said)
        return said

    device_type.device_kind = property(device_kind)
    try:
        yield questions
    finally:
        device_type.device_kind = real

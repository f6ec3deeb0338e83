"""A mismatch of a run on several simulated devices, traced to the device shard it lies in
and the DMA that last wrote its first wrong element."""

from __future__ import annotations

from typing import Any

import numpy as np

from pallaslab.execute.registry import executor_of_mode
from pallaslab.model.source_names import short_source


def device_mismatches(comparison: Any) -> list[str]:
    """For a run on several devices: which device's shard of each output mismatches, and the
    DMA (its ring step, sending device and line) that last wrote the first wrong element."""
    lines = []
    on_devices = executor_of_mode("tpu")  # the executor whose record numbers devices
    for result in comparison.results:
        record = result.device_record
        if record is None or record.num_devices < 2 or result.executor != on_devices:
            continue  # (GPU interpret mode's record numbers blocks, not devices)
        for out in comparison.outputs:
            for pair in out.pairs:
                if result.executor in (pair.a, pair.b) and pair.mismatch.any():
                    lines += _shard_mismatches(record, out.origin, pair.mismatch)
    return lines


def _shard_mismatches(record: Any, origin: str, mismatch: np.ndarray) -> list[str]:
    n = record.num_devices
    if mismatch.ndim == 0 or mismatch.shape[0] % n:
        return []  # not split in equal shards along its first axis: no device to name
    rows = mismatch.shape[0] // n
    written = {t.dst_origin for t in record.transfers
               if t.dst_origin and t.dst_origin.startswith("outputs")}
    # A shard_map's result is its kernel's output, gathered: one kernel output, that one.
    buffer = origin if origin in written or len(written) != 1 else next(iter(written))
    lines = []
    for d in range(n):
        local = mismatch[d * rows:(d + 1) * rows]
        if not local.any():
            continue
        first = tuple(int(i) for i in np.argwhere(local)[0])
        writer = record.last_writer(d, buffer, first)
        how = ("written by no DMA (the kernel's own store, or nothing)" if writer is None else
               f"last written by the DMA of step {writer.step} from device {writer.src_device}"
               f" ({short_source(writer.source) or '?'})")
        lines.append(f"device {d} (rows {d * rows}-{(d + 1) * rows - 1} of {origin}): "
                     f"{int(local.sum()):,} mismatched elements; the first, {first} on the "
                     f"device, was {how}")
    return lines

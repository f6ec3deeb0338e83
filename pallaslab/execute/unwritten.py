"""Output that no program wrote, found from the interpreters' poisoned memory.

Both JAX interpreters give an output buffer that is not aliased to an input a fill value before
the kernel runs: `interpret` fills floats with NaN and integers with their minimum;
`tpu-interpret` (with `uninitialized_memory="nan"`) fills floats with NaN and integers with
their maximum. An element still holding its fill after the run was (almost surely) written
by no program. Integers' fills are extreme values no kernel is likely to compute: an error.
A float NaN may also be one the kernel computed (log of a negative, 0/0): a warning, and a
comparison still fails on it, since NaN equals nothing unless `equal_nan`. Booleans' fills
(False / True) are ordinary values, so booleans are not judged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pallaslab.analysis.findings import MAX_EXAMPLES, Finding
from pallaslab.analysis.tiling import Tiling, tile
from pallaslab.execute.result import RunResult
from pallaslab.model import Kernel

# Integer fill per executor: "min" or "max" of the dtype.
INTEGER_FILL = {"interpret": "min", "vectorized": "min", "tpu-interpret": "max"}


def fill_mask(executor: str, value: np.ndarray) -> np.ndarray | None:
    """Elements holding `executor`'s fill for uninitialised output (None: not judged)."""
    if executor not in INTEGER_FILL:
        return None
    dtype = value.dtype
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return value == (info.min if INTEGER_FILL[executor] == "min" else info.max)
    if np.issubdtype(dtype, np.floating) or "float" in dtype.name:
        return np.isnan(value.astype(np.float32))
    return None


def unwritten_findings(result: RunResult, kernels: Sequence[Kernel]) -> tuple[Finding, ...]:
    """An `unwritten-output` finding per kernel output of the run that holds fill values."""
    if result.outputs is None:
        return ()
    tilings: dict[int, Tiling | None] = {}
    found = []
    for info, value in zip(result.output_info, result.outputs, strict=True):
        if info.kernel is None or info.origin is None or info.kernel >= len(kernels):
            continue
        kernel = kernels[info.kernel]
        if _aliased(kernel, info.origin):
            continue  # starts as its input's values: nothing to find
        mask = fill_mask(result.executor, np.asarray(value))
        if mask is None or not mask.any():
            continue
        if info.kernel not in tilings:
            tilings[info.kernel] = tile(kernel)
        found.append(_finding(result.executor, kernel, info.origin, value, mask,
                              tilings[info.kernel]))
    return tuple(found)


def _device_shards(kernel: Kernel, origin: str, mask: np.ndarray
                   ) -> tuple[list[int], np.ndarray] | None:
    """A shard_map kernel's output gathered from its devices along the first axis: (the
    devices whose shard holds fill values, the first such shard's mask); None otherwise."""
    shape = tuple(kernel.operand(origin).shape)
    if kernel.device_mesh is None or mask.shape == shape or not shape or not shape[0] \
            or mask.shape[1:] != shape[1:] or mask.shape[0] % shape[0]:
        return None
    shards = mask.reshape(mask.shape[0] // shape[0], *shape)
    devices = [d for d in range(len(shards)) if shards[d].any()]
    return devices, shards[devices[0]]


def _aliased(kernel: Kernel, origin: str) -> bool:
    outputs = [op.origin for op in kernel.outputs]
    if origin not in outputs:
        return False
    j = outputs.index(origin)
    return any(int(o) == j for _, o in kernel.input_output_aliases)


def _finding(executor: str, kernel: Kernel, origin: str, value: np.ndarray, mask: np.ndarray,
             tiling: Tiling | None) -> Finding:
    count, total = int(mask.sum()), mask.size
    fill = _fill_text(executor, value.dtype)
    on_devices = ""
    if (shards := _device_shards(kernel, origin, mask)) is not None:
        devices, mask = shards  # blocks and programs below: on the first such device
        rows = kernel.operand(origin).shape[0]
        on_devices = (f" on device(s) {', '.join(str(d) for d in devices)} (each device's "
                      f"{rows} rows of the gathered output; blocks are the first one's)")
    blocks: list[tuple[int, ...]] = []
    programs: list[tuple[int, ...]] = []
    ot = tiling.operands.get(origin) if tiling is not None else None
    if ot is not None and tiling is not None and ot.extent:
        extent = np.maximum(np.asarray(ot.extent, np.int64), 1)
        offset = np.asarray(ot.offset, np.int64)
        hit = np.unique((np.argwhere(mask) + offset) // extent, axis=0)
        blocks = [tuple(int(v) for v in b) for b in hit[:MAX_EXAMPLES]]
        for b in blocks:
            steps = ot.steps_with_block(b)
            programs += [p for p in tiling.programs_at(steps, limit=1) if p not in programs]
    where = f" in block(s) {', '.join(str(b) for b in blocks)}" if blocks else ""
    owners = (f"; the program(s) those blocks are assigned to: "
              f"{', '.join(str(p) for p in programs)}") if programs else \
        "; no program's block covers them" if ot is not None else ""
    nan_note = " (or hold a NaN the kernel computed)" if "NaN" in fill else ""
    return Finding(
        "unwritten-output", "warning" if "NaN" in fill else "error",
        f"{kernel.name}: {origin}: {count:,} of {total:,} element(s) were written by no "
        f"program under {executor}{on_devices}: they still hold its fill for uninitialised "
        f"memory, {fill}{nan_note}{where}{owners}. On hardware these elements are whatever the "
        "memory held. Rule: every output element must be written by some program.",
        operand=origin, programs=tuple(programs[:MAX_EXAMPLES]), blocks=tuple(blocks),
    )


def _fill_text(executor: str, dtype: np.dtype) -> str:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return f"{info.min if INTEGER_FILL[executor] == 'min' else info.max:,}"
    return "NaN"

"""Output that no program wrote, found from the interpreters' poisoned memory.

Both JAX interpreters give an output buffer that is not aliased to an input a fill value before
the kernel runs: `interpret` fills floats with NaN and integers with their minimum;
`tpu-interpret` (with `uninitialized_memory="nan"`) fills floats with NaN and integers with
their maximum. Each executor declares its fill (`ExecutorSpec.integer_fill`, read from the
registry for the executor that really ran: `RunResult.ran_as`). An element still holding its
fill after the run was (almost surely) written by no program. An integer fill is a value
kernels do compute (an int8 `x + x` gives -128 for x = -64), so the value alone does not say:
integers holding the fill are run again once, the suspect kernels under TPU interpret mode with
another fill (`uninitialized_memory="zero"`, or "nan", its maximum, where the first fill was
0), and only the elements whose value changes are unwritten (an error): a written element
holds the same value in both runs. The second run happens only when some integer output holds
its fill, and needs the capture; where it cannot run, the value alone judges.
A float NaN may also be one a program stored: computed from scratch read before it was
written (the interpreters fill scratch with NaN too), from a DMA that never landed, or from
log(-1): unless no program's block covers it, the finding says both (a warning), and a
comparison still fails on it, since NaN equals nothing unless `equal_nan`. The programs named
are those that held each block last (their write-back leaves its final contents); a kernel
without a grid gets element ranges. Booleans' fills
(False / True) are ordinary values, so booleans are not judged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import jax
import numpy as np

from pallaslab.analysis.findings import MAX_EXAMPLES, Finding
from pallaslab.analysis.tiling import Tiling, tile
from pallaslab.execute.registry import find_spec
from pallaslab.execute.result import RunResult
from pallaslab.execute.worker.running import CallbackErrors
from pallaslab.model import Kernel, _jax


def integer_fill(executor: str) -> str | None:
    """"min" or "max": the integer fill of `executor`'s uninitialised memory (None: none)."""
    spec = find_spec(executor)
    return None if spec is None else spec.integer_fill


def fill_mask(executor: str, value: np.ndarray) -> np.ndarray | None:
    """Elements holding `executor`'s fill for uninitialised output (None: not judged)."""
    fill = integer_fill(executor)
    if fill is None:
        return None
    dtype = value.dtype
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return value == (info.min if fill == "min" else info.max)
    if np.issubdtype(dtype, np.floating) or "float" in dtype.name:
        return np.isnan(value.astype(np.float32))
    return None


def unwritten_findings(result: RunResult, kernels: Sequence[Kernel]) -> tuple[Finding, ...]:
    """An `unwritten-output` finding per kernel output of the run that holds fill values.
    Given the `Capture` itself (not a list of its kernels), integers holding the fill are
    confirmed by a second run with another fill (see the module's docstring)."""
    outputs = result.outputs
    if outputs is None:
        return ()
    suspects: dict[int, np.ndarray] = {}
    for i, (info, value) in enumerate(zip(result.output_info, outputs, strict=True)):
        if info.kernel is None or info.origin is None or info.kernel >= len(kernels):
            continue
        if _aliased(kernels[info.kernel], info.origin):
            continue  # starts as its input's values: nothing to find
        mask = fill_mask(result.ran_as, np.asarray(value))
        if mask is not None and mask.any():
            suspects[i] = mask
    suspects = _confirmed(result, kernels, suspects)
    tilings: dict[int, Tiling | None] = {}
    found = []
    for i, mask in suspects.items():
        info, kernel = result.output_info[i], kernels[result.output_info[i].kernel or 0]
        if info.kernel not in tilings:
            tilings[info.kernel or 0] = tile(kernel)
        found.append(_finding(result, kernel, info.origin or "", outputs[i], mask,
                              tilings[info.kernel or 0]))
    return tuple(found)


def unwritten_confirmed(result: RunResult, capture: Sequence[Kernel]) -> RunResult:
    """The result with its integer `unwritten-output` errors judged again with the capture at
    hand (a `Capture`): by a second run with another fill, not by the value alone."""
    if not any(f.code == "unwritten-output" and f.severity == "error" for f in result.findings):
        return result
    kept = tuple(f for f in result.findings if f.code != "unwritten-output")
    found = unwritten_findings(dataclasses.replace(result, findings=kept), capture)
    return dataclasses.replace(result, findings=(*kept, *found))


def _confirmed(result: RunResult, kernels: Sequence[Kernel], suspects: dict[int, np.ndarray]
               ) -> dict[int, np.ndarray]:
    """The suspects (output index -> elements holding the fill), integers kept only where a
    second run with another fill leaves that fill too (a written element holds the same
    value in both runs, so it cannot hold both fills)."""
    outputs = result.outputs
    handle = getattr(kernels, "handle", None)  # a Capture: its jaxpr can run again
    if outputs is None or handle is None or result.inputs is None:
        return suspects
    ints = [i for i in suspects if np.issubdtype(np.asarray(outputs[i]).dtype, np.integer)]
    if not ints:
        return suspects
    first = {i: _fill_value(result.ran_as, np.asarray(outputs[i]).dtype) for i in ints}
    mode: Literal["nan", "zero"] = "nan" if 0 in first.values() else "zero"
    wanted = {id(kernels[result.output_info[i].kernel or 0].handle.eqn) for i in ints}
    try:
        again = _run_with_fill(handle.closed_jaxpr, result.inputs, wanted, mode)
    except Exception:  # the TPU interpreter cannot run these kernels: the value judges
        return suspects
    confirmed = dict(suspects)
    for i in ints:
        # A written element holds the same value in both runs. One no program wrote holds
        # the second fill, or (TPU interpret mode reuses a block's VMEM buffer) what an
        # earlier program left in it: rarely the first fill again.
        mask = suspects[i] & (np.asarray(again[i]) != np.asarray(outputs[i]))
        if mask.any():
            confirmed[i] = mask
        else:
            del confirmed[i]
    return confirmed


def _run_with_fill(closed_jaxpr: Any, inputs: Sequence[np.ndarray], kernels: set[int],
                   mode: Literal["nan", "zero"]) -> list[np.ndarray]:
    """The captured function run again, the kernels of `kernels` (equation ids) under TPU
    interpret mode with `uninitialized_memory=mode`, the others under interpret=True."""
    from jax.experimental.pallas import tpu as pltpu

    params = pltpu.InterpretParams(uninitialized_memory=mode)
    jaxpr = _jax.rewrite_kernels(closed_jaxpr, lambda eqn: {
        "interpret": params if id(eqn) in kernels else True})
    with CallbackErrors():  # a kernel it cannot run raises here: no tracebacks on stderr
        return [np.asarray(v) for v in
                jax.block_until_ready(_jax.jaxpr_callable(jaxpr)(*inputs))]


def _fill_value(executor: str, dtype: np.dtype) -> int:
    info = np.iinfo(dtype)
    return int(info.min if integer_fill(executor) == "min" else info.max)


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


def _finding(result: RunResult, kernel: Kernel, origin: str, value: np.ndarray,
             mask: np.ndarray, tiling: Tiling | None) -> Finding:
    count, total = int(mask.sum()), mask.size
    executor = result.executor
    fill = _fill_text(result.ran_as, value.dtype)
    on_devices = ""
    if (shards := _device_shards(kernel, origin, mask)) is not None:
        devices, mask = shards  # blocks and programs below: on the first such device
        rows = kernel.operand(origin).shape[0]
        on_devices = (f" on device(s) {', '.join(str(d) for d in devices)} (each device's "
                      f"{rows} rows of the gathered output; blocks are the first one's)")
    place = _place(kernel, origin, mask, tiling)
    nan = "NaN" in fill
    name = f"{kernel.name}: {origin}: {count:,} of {total:,} element(s)"
    if nan and not place.uncovered:
        # The interpreters fill outputs and scratch alike: a NaN a program stored (computed
        # from scratch it read before writing, or from a DMA that never landed) looks the same.
        text = (f"{name} hold NaN after the run under {executor}{on_devices}: no program wrote "
                "them (they keep the fill for uninitialised memory, NaN), or the values written "
                "were NaN (computed from uninitialised scratch or from a DMA that never "
                f"landed?){place.text}. Rule: every output element must be written by some "
                "program, from initialised values.")
    else:
        text = (f"{name} were written by no program under {executor}{on_devices}: they still "
                f"hold its fill for uninitialised memory, {fill}{place.text}. On hardware these "
                "elements are whatever the memory held. Rule: every output element must be "
                "written by some program.")
    return Finding("unwritten-output", "warning" if nan else "error", text, operand=origin,
                   programs=place.programs, blocks=place.blocks)


@dataclasses.dataclass(frozen=True)
class _Place:
    """Where fill values lie: the text, the blocks, the programs that last held them, and
    whether no program's block covers any of them (then no program can have written them)."""

    text: str
    blocks: tuple[tuple[int, ...], ...] = ()
    programs: tuple[tuple[int, ...], ...] = ()
    uncovered: bool = False


def _place(kernel: Kernel, origin: str, mask: np.ndarray, tiling: Tiling | None) -> _Place:
    if kernel.programs == 0:
        grid = ", ".join(str(g) for g in kernel.grid)
        return _Place(f"; no program ran: the grid ({grid}) has a zero dimension",
                      uncovered=True)
    ot = tiling.operands.get(origin) if tiling is not None else None
    if not kernel.grid or ot is None or tiling is None or not ot.extent:
        only = "; the kernel's only program held them" if not kernel.grid else ""
        return _Place(f" in {_element_ranges(mask)}{only}", programs=((),) if only else ())
    extent = np.maximum(np.asarray(ot.extent, np.int64), 1)
    offset = np.asarray(ot.offset, np.int64)
    hit = np.unique((np.argwhere(mask) + offset) // extent, axis=0)
    held = {tuple(int(v) for v in b) for b in np.unique(ot.block_indices, axis=0)}
    blocks = [tuple(int(v) for v in b) for b in hit]
    if not any(b in held for b in blocks):
        shown = ", ".join(str(b) for b in blocks[:MAX_EXAMPLES])
        return _Place(f" in block(s) {shown}; no program's block covers them",
                      blocks=tuple(blocks[:MAX_EXAMPLES]), uncovered=True)
    blocks = [b for b in blocks if b in held][:MAX_EXAMPLES]
    # The interpreters write each program's block back: the last program holding a block
    # leaves its final contents (TPU: the write-back at the end of its run of visits).
    programs: list[tuple[int, ...]] = []
    for b in blocks:
        last = ot.steps_with_block(b)[-1:]
        programs += [p for p in tiling.programs_at(last) if p not in programs]
    return _Place(f" in block(s) {', '.join(str(b) for b in blocks)}; the program(s) that "
                  f"held those blocks last: {', '.join(str(p) for p in programs)}",
                  blocks=tuple(blocks), programs=tuple(programs[:MAX_EXAMPLES]))


def _element_ranges(mask: np.ndarray) -> str:
    """The box of elements holding fill values, as slices ("elements [192:256, :]")."""
    if mask.ndim == 0:
        return "its only element"
    where = np.argwhere(mask)
    lo, hi = where.min(axis=0), where.max(axis=0) + 1
    parts = [":" if a == 0 and b == n else f"{a}:{b}"
             for a, b, n in zip(lo, hi, mask.shape, strict=True)]
    box = int(np.prod(hi - lo))
    return f"element{'s' if box > 1 else ''} {'within ' if box > mask.sum() else ''}" \
        f"[{', '.join(parts)}]"


def _fill_text(executor: str, dtype: np.dtype) -> str:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return f"{info.min if integer_fill(executor) == 'min' else info.max:,}"
    return "NaN"

"""Mesh kernels in the stepper: each program is one core (TPU) or one block (Mosaic GPU), every
operand one whole-array block carried from program to program."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from pallaslab.analysis.tiling import OperandTiling, Tiling
from pallaslab.errors import UnavailableError
from pallaslab.model import Kernel, _jax
from pallaslab.model.source_names import short_source

if TYPE_CHECKING:
    from pallaslab.model._jax.runner import ProgramRunner


class CoresSignalEachOther(UnavailableError):
    """A mesh kernel whose cores signal each other cannot be stepped one core alone;
    `pallaslab.step` steps it with `pallaslab.execute.stepping.core_stepper.CoreStepper` instead."""


def mesh_runner_or_raise(kernel: Kernel) -> ProgramRunner:
    from pallaslab.execute.stepping.core_stepper import talking_cores

    if (talking := talking_cores(kernel)) is not None:
        # alone, a core would wait for a signal no one sends (or lose its effect)
        if kernel.backend == "mosaic_gpu":
            raise UnavailableError(
                f"mesh kernel {kernel.name} cannot be stepped block by block: its blocks "
                f"signal each other (at {talking}), so no block can run alone. Run it whole "
                "under gpu-interpret: pallaslab.run(fn, *args, executor='gpu-interpret')")
        raise CoresSignalEachOther(
            f"mesh kernel {kernel.name} cannot be stepped one core alone: its cores signal "
            f"each other (a semaphore signal or DMA to another core at {talking}). "
            "pallaslab.step(fn, *args) steps its cores together under tpu-interpret "
            "(pallaslab.execute.stepping.core_stepper.CoreStepper)")
    try:
        return _jax.program_runner(kernel)
    except Exception as err:
        raise UnavailableError(
            f"mesh kernel {kernel.name} cannot be stepped core by core: "
            f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}. Run it whole under "
            "tpu-interpret: pallaslab.run(fn, *args, executor='tpu-interpret')") from None


def mesh_tiling(kernel: Kernel, runner: ProgramRunner) -> Tiling:
    """A mesh kernel's "tiling": its mesh as the grid, each operand one whole-array block
    (every core sees all of it; what it touches is its own DMAs' business)."""
    grid = tuple(runner.grid)
    programs = math.prod(grid)
    ops = [op for op in kernel.operands if op.role != "scratch" and not op.scalar_prefetch]
    if len(ops) != len(runner.block_shapes) or any(
            tuple(op.shape) != tuple(shape) for op, shape in
            zip(ops, runner.block_shapes, strict=True)):
        raise UnavailableError(
            f"mesh kernel {kernel.name} cannot be stepped core by core: its operands "
            f"{[op.origin for op in ops]} do not match the operands of its body "
            f"{[list(b) for b in runner.block_shapes]}")
    return Tiling(grid, {op.origin: OperandTiling(
        origin=op.origin, role=op.role, shape=tuple(op.shape), extent=tuple(op.shape),
        block_indices=np.zeros((programs, len(op.shape)), np.int32),
        fetch_mask=np.zeros(programs, bool), windowed=False, itemsize=op.itemsize,
        scale=tuple(op.shape), offset=(0,) * len(op.shape)) for op in ops})


def mesh_note(kernel: Kernel) -> str:
    """How a mesh kernel's programs are stepped."""
    if kernel.backend != "mosaic_gpu":
        return (f"mesh kernel {kernel.name}: each program is one core of its "
                f"{_mesh_text(kernel)} (program ids = mesh coordinates), run alone and in "
                "order with its own scratch (fresh each core), on the whole HBM operands the "
                "cores before it left; tpu-interpret runs the cores together")
    warpgroups = kernel.mesh.warpgroups if kernel.mesh is not None else None
    axes = [f"{n}={s}" for n, s in (kernel.mesh.axes if kernel.mesh else ())
            if warpgroups is None or n != warpgroups[0]]
    blocks = f"one block of its grid ({', '.join(axes)})" if axes else "its single block"
    together = (f"; its {warpgroups[1]} warpgroups ({warpgroups[0]}) run together within the "
                "block, as threads, since they synchronise through barriers and SMEM"
                if warpgroups is not None and warpgroups[1] > 1 else "")
    return (f"Mosaic GPU kernel {kernel.name}: each program is {blocks} (program ids = block "
            "coordinates), run alone and in order by JAX's Mosaic GPU interpreter with its "
            "own shared memory and barriers, on the whole GMEM operands the blocks before it "
            f"left{together}")


def _mesh_text(kernel: Kernel) -> str:
    mesh = kernel.mesh
    if mesh is None:
        return "mesh"
    axes = ", ".join(f"{name}={size}" for name, size in mesh.axes)
    return f"{mesh.kind} ({axes})"


def core_mismatches(comparison: Any) -> list[str]:
    """For a TPU mesh kernel run under tpu-interpret on one device: which core last wrote the
    first mismatched element of each output (the DMA in the interpreter's record, its core and
    line), or that no DMA wrote it."""
    from pallaslab.model._jax.mesh_runners import mesh_interpret_buffers

    lines: list[str] = []
    for out in comparison.outputs:
        kernel = next((k for k in comparison.kernels if k.index == out.kernel), None)
        if kernel is None or kernel.kind != "mesh" or kernel.backend == "mosaic_gpu":
            continue
        origin = out.origin if any(op.origin == out.origin for op in kernel.outputs) else \
            (kernel.outputs[0].origin if len(kernel.outputs) == 1 else None)
        labels = {f"{space} #{i}" for (space, i), o in mesh_interpret_buffers(kernel).items()
                  if o == origin}
        for pair in out.pairs:
            record = next((r.device_record for r in comparison.results
                           if r.executor in (pair.a, pair.b) and r.device_record is not None
                           and r.device_record.num_devices == 1), None)
            if record is None or origin is None or not pair.mismatch.any():
                continue
            first = tuple(int(i) for i in np.argwhere(pair.mismatch)[0])
            writer = None
            for t in record.transfers:
                if (t.dst_origin == origin or t.dst_buffer in labels) and (
                        t.dst_region is None or all(lo <= i < hi for i, (lo, hi) in
                                                    zip(first, t.dst_region, strict=False))):
                    writer = t
            how = ("written by no DMA (a core's own store, or nothing)" if writer is None else
                   f"last written by core {writer.core if writer.core is not None else '?'}'s "
                   f"DMA at {short_source(writer.source) or '?'}")
            lines.append(f"{out.origin} of mesh kernel {kernel.name} ({pair.a} vs {pair.b}): "
                         f"{int(pair.mismatch.sum()):,} mismatched elements; the first, "
                         f"{first}, was {how}")
    return lines

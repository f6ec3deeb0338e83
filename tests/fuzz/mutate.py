"""Single-bug variants of a description. Each operator returns the mutated description or
None where it does not apply; the mutant's oracle is the unmutated description's."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from fuzz.spec import (
    AtomicKernel,
    BlockKernel,
    DmaKernel,
    Kernel,
    MosaicGpuKernel,
    Operand,
    PipelineKernel,
    RemoteKernel,
    TritonKernel,
)

Mutation = Callable[[Kernel], Kernel | None]


def mutants_of(kernel: Kernel) -> list[tuple[str, Kernel]]:
    found = [(name, op(kernel)) for name, op in MUTATIONS.items()]
    return [(name, m) for name, m in found if m is not None]


def _replace_operand(k: BlockKernel, position: int, o: Operand) -> BlockKernel:
    if position == len(k.inputs):
        return dataclasses.replace(k, output=o)
    inputs = list(k.inputs)
    inputs[position] = o
    return dataclasses.replace(k, inputs=tuple(inputs))


def map_off_by_one(k: Kernel) -> Kernel | None:
    """The first operand whose map reads a grid coordinate of extent > 1 takes the next
    block along it (clamped to the last: still in bounds)."""
    if isinstance(k, PipelineKernel):
        return _pipeline_row_off_by_one(k)
    if isinstance(k, MosaicGpuKernel):
        return _mosaic_gpu_col_off_by_one(k)
    if not isinstance(k, BlockKernel):
        return None
    for position, o in enumerate((*k.inputs, k.output)):
        for c, n in zip(k.coords, k.grid, strict=True):
            if n > 1 and re.search(rf"\b{c}\b", o.index_map) and "p[" not in o.index_map:
                expr = re.sub(rf"\b{c}\b", f"min({c} + 1, n{c} - 1)", o.index_map, count=1)
                return _replace_operand(k, position, dataclasses.replace(o, index_map=expr))
    return None


def _pipeline_row_off_by_one(k: PipelineKernel) -> PipelineKernel | None:
    """The first input's inner map takes the next block row (clamped: still in bounds)."""
    if k.inner_grid[0] < 2:
        return None
    shifted = re.sub(r"\bi\b", "min(i + 1, ni - 1)", k.rows[0], count=1)
    return dataclasses.replace(k, rows=(shifted, *k.rows[1:]))


def _mosaic_gpu_col_off_by_one(k: MosaicGpuKernel) -> MosaicGpuKernel | None:
    """The first input's pipeline reads the next column tile (clamped: still in bounds)."""
    if k.tiles < 2:
        return None
    shifted = re.sub(r"\bc\b", "min(c + 1, nc - 1)", k.cols[0], count=1)
    return dataclasses.replace(k, cols=(shifted, *k.cols[1:]))


def block_rows_crossed(k: Kernel) -> Kernel | None:
    """Each block of a Mosaic GPU kernel writes its tiles into the next block's rows."""
    if isinstance(k, MosaicGpuKernel) and k.blocks > 1:
        return dataclasses.replace(k, out_row="(b + 1) % nb")
    return None


def map_swapped(k: Kernel) -> Kernel | None:
    """An input's map swaps its last two block coordinates (square blocks, square grid)."""
    if not isinstance(k, BlockKernel):
        return None
    extents = dict(zip(k.coords, k.grid, strict=True))
    for position, o in enumerate(k.inputs):
        m = re.fullmatch(r"\((.*?)(\w+), (\w+)\)", o.index_map)
        if (m and o.block[-1] == o.block[-2] and o.shape[-1] == o.shape[-2]
                and m[2] in extents and m[3] in extents and extents[m[2]] == extents[m[3]] > 1):
            swapped = f"({m[1]}{m[3]}, {m[2]})"
            return _replace_operand(k, position, dataclasses.replace(o, index_map=swapped))
    return None


def missing_init(k: Kernel) -> Kernel | None:
    return dataclasses.replace(k, skip_init=True) if isinstance(k, BlockKernel) and \
        k.init_coord else None


def wrong_reduction_axis(k: Kernel) -> Kernel | None:
    """The accumulator's init keyed to another grid axis than the reduction's."""
    if not isinstance(k, BlockKernel) or not k.init_coord:
        return None
    extents = zip(k.coords, k.grid, strict=True)
    other = next((c for c, n in extents if c != k.init_coord and n > 1), None)
    return dataclasses.replace(k, init_coord=other) if other else None


def dropped_last_store(k: Kernel) -> Kernel | None:
    if isinstance(k, PipelineKernel | AtomicKernel | MosaicGpuKernel | RemoteKernel):
        return None
    return dataclasses.replace(k, skip_last_store=True)


def dma_source_off_by_one(k: Kernel) -> Kernel | None:
    if not isinstance(k, DmaKernel) or k.grid[0] < 2:
        return None
    return dataclasses.replace(k, source=re.sub(r"\bi\b", "min(i + 1, ni - 1)", k.source,
                                                count=1))


def mask_off_by_one(k: Kernel) -> Kernel | None:
    """The mask admits one element (column) fewer than the array holds."""
    return dataclasses.replace(k, mask_shift=-1) if isinstance(k, TritonKernel) else None


def wrong_fill(k: Kernel) -> Kernel | None:
    """A masked max fills the masked-off lanes with 0, not -inf."""
    if isinstance(k, TritonKernel) and k.layout == "rows" and k.op == "max":
        return dataclasses.replace(k, other_zero=True)
    return None


def atomic_wrong_index(k: Kernel) -> Kernel | None:
    """A histogram's lanes fold into the next bin."""
    if isinstance(k, AtomicKernel) and k.layout == "histogram":
        return dataclasses.replace(k, index_shift=1)
    return None


def atomic_wrong_op(k: Kernel) -> Kernel | None:
    """max where add was meant, add where max or min was."""
    if not isinstance(k, AtomicKernel):
        return None
    return dataclasses.replace(k, op="max" if k.op == "add" else "add")


def store_not_atomic(k: Kernel) -> Kernel | None:
    """Each program stores its fold where it should fold it in atomically: the last wins."""
    if isinstance(k, AtomicKernel) and k.layout != "histogram":
        return dataclasses.replace(k, plain_store=True)
    return None


def wrong_neighbour(k: Kernel) -> Kernel | None:
    """Each device sends to the device one further around the ring."""
    if isinstance(k, RemoteKernel):
        return dataclasses.replace(k, shift=(k.shift + 1) % k.devices)
    return None


def missing_recv_wait(k: Kernel) -> Kernel | None:
    """The receiver reads its buffer without waiting for the copy to land."""
    return dataclasses.replace(k, wait_recv=False) if isinstance(k, RemoteKernel) else None


MUTATIONS: dict[str, Mutation] = {
    "map-off-by-one": map_off_by_one, "map-swapped": map_swapped, "missing-init": missing_init,
    "wrong-reduction-axis": wrong_reduction_axis, "dropped-last-store": dropped_last_store,
    "dma-source-off-by-one": dma_source_off_by_one, "mask-off-by-one": mask_off_by_one,
    "wrong-fill": wrong_fill, "atomic-wrong-index": atomic_wrong_index,
    "atomic-wrong-op": atomic_wrong_op, "store-not-atomic": store_not_atomic,
    "block-rows-crossed": block_rows_crossed, "wrong-neighbour": wrong_neighbour,
    "missing-recv-wait": missing_recv_wait,
}

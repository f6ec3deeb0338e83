"""How the batched runner (`vectorize.run_batched`) reads and writes blocks.

A regularly tiled operand (`Tiles`, decided by `pallaslab.execute.executors.vectorize_layout`) is
viewed once as `(blocks..., block...)` with a reshape and a transpose; a scan step then takes its
lanes' blocks with one slice, and outputs are put back with the inverse transpose. Anything
else goes through the index maps' start indices: a gather per operand and a scatter per
output, as the HLO interpreter's dynamic slices would.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax._src.pallas import hlo_interpreter as hlo

# Per array dimension: (grid dimension whose program id is the block index, offset in blocks),
# or (None, constant block index).
Layout = tuple[tuple[int | None, int], ...]


@dataclasses.dataclass(frozen=True)
class Lanes:
    """The grid split into batched dimensions (lanes, vmapped) and scanned ones (steps)."""

    grid: tuple[int, ...]
    batched: tuple[int, ...]
    scanned: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.grid[d] for d in self.batched)

    @property
    def count(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class Tiles:
    """An array tiled regularly by its blocks: read and written without gathers/scatters."""

    layout: Layout
    shape: tuple[int, ...]  # the array's
    block: tuple[int, ...]  # elements per array dimension (1 when squeezed)
    squeezed: tuple[bool, ...]

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(a // b for a, b in zip(self.shape, self.block, strict=True))

    @property
    def kept_block(self) -> tuple[int, ...]:
        return tuple(b for b, s in zip(self.block, self.squeezed, strict=True) if not s)

    def lane_axes(self, lanes: Lanes) -> tuple[bool, ...]:
        """Per batched dimension: do this operand's blocks change along it (else vmap None)?"""
        mapped = {g for g, _ in self.layout}
        return tuple(d in mapped for d in lanes.batched)

    def visits_once(self, lanes: Lanes) -> bool:
        """Is every block visited by one program at most (each grid dimension in the map)?"""
        mapped = {g for g, _ in self.layout}
        return all(d in mapped for d, n in enumerate(lanes.grid) if n > 1)

    def read(self, array: Any, lanes: Lanes, step_ids: Any) -> Any:
        """The lanes' blocks at one scan step: (mapped batched dims..., block...), sliced
        from the array viewed as (A0/b0, b0, A1/b1, b1, ...) (a free reshape), so XLA can
        read them in place, e.g. as a dot's operand, instead of copying the array first."""
        starts: list[Any] = []
        sizes: list[int] = []
        for (g, c), b in zip(self.layout, self.block, strict=True):
            if g is not None and g in lanes.batched:
                starts += [c, 0]
                sizes += [lanes.grid[g], b]
            else:
                starts += [c if g is None else step_ids[lanes.scanned.index(g)] + c, 0]
                sizes += [1, b]
        box = jax.lax.dynamic_slice(self._split(array), starts, sizes)
        # (array dimension, its batched grid dimension), in the lanes' order
        mapped = sorted(((j, g) for j, (g, _) in enumerate(self.layout)
                         if g is not None and g in lanes.batched),
                        key=lambda jg: lanes.batched.index(jg[1]))
        dims = [j for j, _ in mapped]
        box = jnp.transpose(box, (*(2 * j for j in dims),
                                  *(2 * j for j in range(len(self.layout)) if j not in dims),
                                  *range(1, 2 * len(self.layout), 2)))
        return box.reshape(*(lanes.grid[g] for _, g in mapped), *self.kept_block)

    def write(self, array: Any, blocks: Any, labels: tuple[int, ...], grid: tuple[int, ...]
              ) -> Any:
        """Put `blocks` (one axis per grid dimension in `labels`, then the block) into
        `array`; grid dimensions not in the index map must have one program."""
        axis = {g: a for a, g in enumerate(labels)}
        mapped = [g for g, _ in self.layout if g is not None and g in axis]
        assert all(grid[g] == 1 for g in labels if g not in mapped) and all(
            grid[g] == 1 for g, _ in self.layout if g is not None and g not in axis), \
            "a block written twice"
        n, rest = len(self.layout), range(len(labels), blocks.ndim)
        blocks = jnp.transpose(blocks, (*(axis[g] for g in labels if g not in mapped),
                                        *(axis[g] for g in mapped), *rest))
        extents = [grid[g] if g in axis else 1 for g, _ in self.layout]
        blocks = blocks.reshape(*extents, *self.block)  # squeezed block dims back as 1s
        box = jnp.transpose(blocks, [x for j in range(n) for x in (j, n + j)])
        box = box.reshape([e * b for e, b in zip(extents, self.block, strict=True)])
        if box.shape == array.shape:
            return box  # every element written: the initial contents are not needed
        starts = [c * b for (_, c), b in zip(self.layout, self.block, strict=True)]
        return jax.lax.dynamic_update_slice(array, box, starts)

    def _split(self, array: Any) -> Any:
        return array.reshape([x for pair in zip(self.counts, self.block, strict=True)
                              for x in pair])


def unrun_outputs(eqn: Any, args: Any) -> list[Any]:
    """The outputs of a `pallas_call` equation that runs no program (a zero grid dimension),
    as the HLO interpreter leaves them: each its fill for uninitialised memory, or its aliased
    input. Built without indexing, so zero-size arrays are fine."""
    p = eqn.params
    return list(hlo._initialize_output_vals(p["grid_mapping"].block_mappings_output, list(args),
                                            tuple(p["input_output_aliases"])))


def gather(array: Any, starts: Any, shape: tuple[int, ...], squeezed: tuple[bool, ...],
           lanes: Lanes) -> Any:
    """Each lane's block at its start (L, ndim): (lanes..., block...)."""
    blocks = jax.vmap(_slicer(shape, squeezed, array))(starts)
    return blocks.reshape(*lanes.shape, *blocks.shape[1:])


def _slicer(shape: tuple[int, ...], squeezed: tuple[bool, ...], array: Any
            ) -> Callable[[Any], Any]:
    def take(start: Any) -> Any:
        return hlo._dynamic_slice(tuple(start[i] for i in range(len(shape))), shape, array,
                                  squeezed)
    return take


def scatter(array: Any, blocks: Any, starts: Any, shape: tuple[int, ...],
            squeezed: tuple[bool, ...]) -> Any:
    """Write each lane's block back at its start: one XLA scatter (the caller batches only
    programs that write distinct blocks, so no two lanes overlap)."""
    kept = tuple(i for i, s in enumerate(squeezed) if not s)
    flat = blocks.reshape(starts.shape[0], *blocks.shape[blocks.ndim - len(kept):])
    full = jax.vmap(lambda b: jax.lax.broadcast_in_dim(b, shape, kept))(flat)
    # dynamic_update_slice clamps starts so the block fits: do the same before scattering
    limit = jnp.asarray(array.shape, jnp.int32) - jnp.asarray(shape, jnp.int32)
    clamped = jnp.clip(starts.astype(jnp.int32), 0, limit)
    dnums = jax.lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(1, len(shape) + 1)), inserted_window_dims=(),
        scatter_dims_to_operand_dims=tuple(range(len(shape))))
    return jax.lax.scatter(array, clamped, full, dnums, indices_are_sorted=False,
                           unique_indices=True,
                           mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)

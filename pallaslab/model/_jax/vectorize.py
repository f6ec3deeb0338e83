"""A `pallas_call` run as one batched XLA computation: the discharged kernel body `vmap`ped
over the programs of the batched grid dimensions and `scan`ned over the others in row-major
order. Blocks of regularly tiled operands are sliced out of the array and put back with
reshapes and transposes (`vectorize_blocks.Tiles`; a fully written output needs no NaN fill);
the others are gathered and scattered with the index maps' start indices.

This mirrors JAX's HLO interpreter (`interpret=True`) — the same discharged body, start
indices, padding, uninitialized values and aliasing — except that the programs of one scan
step run at once. The caller (`pallaslab.execute.executors.vectorized`) decides which dimensions
may be batched; this module only does what it is told.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src.pallas import core as pallas_core
from jax._src.pallas import hlo_interpreter as hlo
from jax._src.pallas import primitives as pallas_primitives

from pallaslab.model._jax import roundings
from pallaslab.model._jax.base import Jaxpr
from pallaslab.model._jax.rewrite import eval_replacing
from pallaslab.model._jax.vectorize_blocks import Lanes, Layout, Tiles, gather, scatter


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """Which grid dimensions one kernel's programs are batched over (the rest are scanned)."""

    batched_dims: tuple[int, ...]
    # Per output: its block stays the same across the scanned steps of every lane (a
    # reduction's accumulator block), so it is carried through the scan as blocks and
    # written back once, instead of gathered and scattered at every step.
    carried_outputs: tuple[bool, ...] = ()
    # (origin, layout) of the operands whose blocks tile the array regularly: read and
    # written with reshapes and slices instead of gathers and scatters.
    layouts: tuple[tuple[str, Layout], ...] = ()


def vectorized_jaxpr_callable(closed_jaxpr: Jaxpr, plans: dict[int, BatchPlan]
                              ) -> Callable[..., list[Any]]:
    """Evaluate a captured jaxpr with each planned kernel equation (keyed by `id(eqn)`) run
    batched; wrap in `jax.jit`."""
    def matches(eqn: Any) -> bool:
        return id(eqn) in plans

    def replace(eqn: Any, invals: list[Any]) -> list[Any]:
        return run_batched(eqn, invals, plans[id(eqn)])

    def call(*args: Any) -> list[Any]:
        return eval_replacing(closed_jaxpr.jaxpr, closed_jaxpr.consts, args, matches, replace)

    return call


def run_batched(eqn: Any, args: Sequence[Any], plan: BatchPlan) -> list[Any]:
    """The outputs of one `pallas_call` equation bound on `args`, batched per `plan`."""
    return _BatchedCall(eqn, args, plan).run()


class _BatchedCall:
    """One `pallas_call` as a scan over steps of vmapped lanes. Outputs are, each:
    carried (one block per lane, through the scan), visited once (regular tiling: each
    step's blocks stacked by the scan and transposed into place at the end), or scattered
    into the array carried through the scan."""

    def __init__(self, eqn: Any, args: Sequence[Any], plan: BatchPlan) -> None:
        p = eqn.params
        gm = self.gm = p["grid_mapping"]
        if gm.num_dynamic_grid_bounds:
            raise NotImplementedError("dynamic grid bounds")
        grid = tuple(int(g) for g in gm.grid)
        self.body, self.consts, self.scratch_avals = hlo.kernel_to_hlo_jaxpr(p["jaxpr"], (), gm)
        self.scalars = tuple(args[gm.slice_index_ops])
        block_args = list(args[len(self.scalars):])
        aliases = tuple(p["input_output_aliases"])
        outs = hlo._initialize_output_vals(gm.block_mappings_output, block_args, aliases)
        self.mappings = gm.block_mappings
        self.shapes = [pallas_core._get_block_shape(bm.block_shape) for bm in self.mappings]
        self.squeezed = [tuple(isinstance(d, pallas_core.Squeezed) for d in bm.block_shape)
                         for bm in self.mappings]
        arrays = [hlo._pad_to_block_dimension(x, s)
                  for x, s in zip([*block_args, *outs], self.shapes, strict=True)]
        n_in = self.n_in = len(block_args)
        self.arrays = arrays
        n_s = len(self.scalars)
        self.aliased = {i - n_s: o for i, o in aliases
                        if arrays[i - n_s].shape == arrays[n_in + o].shape}
        batched = tuple(sorted(plan.batched_dims))
        self.lanes = Lanes(grid, batched, tuple(d for d in range(len(grid)) if d not in batched))
        self.steps = _index_grid(grid, self.lanes.scanned)  # (S, len(scanned))
        n_out = len(outs)
        self.carried = [bool(c) and j not in self.aliased.values()
                        for j, c in enumerate(plan.carried_outputs or (False,) * n_out)]
        layouts = dict(plan.layouts)
        self.tiles = [self._tiles(k, layouts.get(bm.origin))
                      for k, bm in enumerate(self.mappings)]
        self.once = [not self.carried[j] and t is not None and t.visits_once(self.lanes)
                     for j, t in enumerate(self.tiles[n_in:])]

    def _tiles(self, k: int, layout: Layout | None) -> Tiles | None:
        """The regular tiling of block mapping `k`, where this runner can use it."""
        array, shape = self.arrays[k], self.shapes[k]
        aliased = k in self.aliased or k - self.n_in in self.aliased.values()
        if layout is None or aliased or len(layout) != array.ndim or \
                array.shape != self.mappings[k].array_aval.shape or \
                any(a % b for a, b in zip(array.shape, shape, strict=True)):
            return None
        tiles = Tiles(layout, array.shape, shape, self.squeezed[k])
        j = k - self.n_in
        # An output block must differ per lane and, unless carried, per step: one revisited
        # across steps keeps the scatter path, which keeps program order.
        if j >= 0 and (not all(tiles.lane_axes(self.lanes)) or
                       (not self.carried[j] and not tiles.visits_once(self.lanes))):
            return None
        return tiles

    def run(self) -> list[Any]:
        n_out = len(self.arrays) - self.n_in
        first = jnp.asarray(self.steps[0])
        init_starts = self._starts(first) if any(
            self.carried[j] and self.tiles[self.n_in + j] is None for j in range(n_out)) else None
        kept0 = [self._read(self.n_in + j, first, init_starts) if self.carried[j]
                 else _EMPTY for j in range(n_out)]
        outs0 = [_EMPTY if self.carried[j] or self.once[j] else self.arrays[self.n_in + j]
                 for j in range(n_out)]
        scratch0 = [jnp.broadcast_to(pallas_primitives.uninitialized_value(a.shape, a.dtype),
                                     (*self.lanes.shape, *a.shape)) for a in self.scratch_avals]
        if len(self.steps) == 1:  # no loop: lets XLA fuse the reads and writes around it
            (outs, kept, _), ys = self._step((outs0, kept0, scratch0), first)
            ys = [y[None] for y in ys]
        else:
            (outs, kept, _), ys = jax.lax.scan(self._step, (outs0, kept0, scratch0),
                                               jnp.asarray(self.steps))
        final = [self._finish(j, outs[j], kept[j], ys, init_starts) for j in range(n_out)]
        return [o[tuple(slice(0, s) for s in bm.array_aval.shape)]
                if o.shape != bm.array_aval.shape else o
                for o, bm in zip(final, self.gm.block_mappings_output, strict=True)]

    def _finish(self, j: int, out: Any, kept: Any, ys: list[Any], starts: Any) -> Any:
        k = self.n_in + j
        tiles, lanes = self.tiles[k], self.lanes
        if self.carried[j]:
            if tiles is None:
                return scatter(self.arrays[k], kept, starts[k], self.shapes[k],
                               self.squeezed[k])
            return tiles.write(self.arrays[k], kept, lanes.batched, lanes.grid)
        if self.once[j]:
            assert tiles is not None
            stacked = ys[sum(self.once[:j])]
            stacked = stacked.reshape(*(lanes.grid[d] for d in lanes.scanned),
                                      *stacked.shape[1:])
            return tiles.write(self.arrays[k], stacked, (*lanes.scanned, *lanes.batched),
                               lanes.grid)
        return out

    def _step(self, carry: tuple[list[Any], list[Any], list[Any]], step_ids: Any
              ) -> tuple[tuple[list[Any], list[Any], list[Any]], list[Any]]:
        outs, kept, scratch = carry
        n_in, n_out = self.n_in, len(outs)
        needs_starts = any(t is None for t in self.tiles[:n_in]) or any(
            t is None and not c for t, c in zip(self.tiles[n_in:], self.carried, strict=True))
        starts = self._starts(step_ids) if needs_starts else []
        # An aliased input reads the output's current contents: the interpreter copies each
        # step's output writes into the aliased input (the caller refuses written inputs).
        blocks = [self._read(i, step_ids, starts, outs[self.aliased[i]]
                             if i in self.aliased else None) for i in range(n_in)]
        blocks += [kept[j] if self.carried[j] else self._read(n_in + j, step_ids, starts,
                                                              outs[j]) for j in range(n_out)]
        results = self._programs(step_ids, blocks, scratch)
        n_s = len(self.scalars)
        new_blocks = results[n_s:n_s + len(self.mappings)]
        new_scratch = list(results[n_s + len(self.mappings):])
        new_outs = [out if self.carried[j] or self.once[j] else
                    scatter(out, new_blocks[n_in + j], starts[n_in + j], self.shapes[n_in + j],
                            self.squeezed[n_in + j]) for j, out in enumerate(outs)]
        new_kept = [new_blocks[n_in + j] if self.carried[j] else kept[j] for j in range(n_out)]
        ys = [new_blocks[n_in + j] for j in range(n_out) if self.once[j]]
        return (new_outs, new_kept, new_scratch), ys

    def _read(self, k: int, step_ids: Any, starts: Any, source: Any = None) -> Any:
        """Block mapping `k`'s blocks for the lanes of one step: (lanes..., block...), with
        only the lane axes along which they change when regular."""
        tiles = self.tiles[k]
        if tiles is not None:
            return tiles.read(self.arrays[k], self.lanes, step_ids)
        array = self.arrays[k] if source is None else source
        return gather(array, starts[k], self.shapes[k], self.squeezed[k], self.lanes)

    def _in_axes(self, k: int) -> list[int | None]:
        """Per vmap level, 0 or None: the same block for every lane of that level (an input
        that does not depend on that grid dimension), not copied per lane."""
        tiles = self.tiles[k]
        if tiles is None or k >= self.n_in:
            return [0] * len(self.lanes.batched)
        return [0 if present else None for present in tiles.lane_axes(self.lanes)]

    def _starts(self, step_ids: Any) -> list[Any]:
        """Per block mapping, (L, ndim) start indices of the lanes' blocks at one step."""
        lanes, gm = self.lanes, self.gm
        cols: list[Any] = [None] * len(lanes.grid)
        ids = _index_grid(lanes.grid, lanes.batched)
        for j, d in enumerate(lanes.batched):
            cols[d] = jnp.asarray(ids[:, j])
        for j, d in enumerate(lanes.scanned):
            cols[d] = jnp.broadcast_to(step_ids[j], (lanes.count,))
        pids = jnp.stack(cols, axis=1) if cols else jnp.zeros((lanes.count, 0), jnp.int32)

        def one(pid: Any) -> list[Any]:
            ids = tuple(pid[d] for d in range(len(lanes.grid)))
            with pallas_core.grid_env(_grid_env(gm, ids, lanes.grid)):
                return [jnp.stack([jnp.asarray(s, jnp.int32) for s in
                                   bm.compute_start_indices_interpret(ids, *self.scalars)])
                        if bm.block_shape else jnp.zeros((0,), jnp.int32)
                        for bm in self.mappings]
        return jax.vmap(one)(pids)

    def _programs(self, step_ids: Any, blocks: list[Any], scratch: list[Any]) -> list[Any]:
        """The body of every lane at one step: a vmap per batched dimension, so a block
        that does not change along one (in_axes None) is not copied for each of its lanes."""
        lanes = self.lanes
        n_b = len(lanes.batched)

        def one(lane_ids: tuple[Any, ...], blocks: list[Any], scratch: list[Any]) -> list[Any]:
            ids: list[Any] = [None] * len(lanes.grid)
            for j, d in enumerate(lanes.batched):
                ids[d] = lane_ids[j]
            for j, d in enumerate(lanes.scanned):
                ids[d] = step_ids[j]
            with pallas_core.grid_env(_grid_env(self.gm, tuple(ids), lanes.grid)):
                # Explicit roundings kept whatever the compiler allows (`roundings`).
                return eval_replacing(
                    self.body, self.consts, [*self.scalars, *blocks, *scratch],
                    roundings.is_narrowing_convert, roundings.rounded_convert)

        block_axes = [self._in_axes(k) for k in range(len(blocks))]
        fn = one
        for level in reversed(range(n_b)):
            fn = jax.vmap(fn, in_axes=(tuple(0 if t == level else None for t in range(n_b)),
                                       [a[level] for a in block_axes], 0))
        lane_ids = tuple(jnp.arange(lanes.grid[d], dtype=jnp.int32) for d in lanes.batched)
        return fn(lane_ids, blocks, scratch)


_EMPTY = np.zeros((0,), np.int32)  # a carry slot an output does not use


def _grid_env(gm: Any, ids: tuple[Any, ...], grid: tuple[int, ...]) -> Any:
    if gm.local_grid_env is not None:
        return gm.local_grid_env(ids, grid)
    return tuple(pallas_core.GridAxis(i, b) for d, (i, b) in enumerate(zip(ids, grid, strict=True))
                 if d not in gm.vmapped_dims)


def _index_grid(grid: tuple[int, ...], dims: tuple[int, ...]) -> np.ndarray:
    """Row-major combinations of the given grid dimensions' indices, (N, len(dims)) int32."""
    if not dims:
        return np.zeros((1, 0), np.int32)
    combos = itertools.product(*(range(grid[d]) for d in dims))
    return np.asarray(list(combos), np.int32).reshape(math.prod(grid[d] for d in dims), len(dims))

# Primitives whose effects depend on the order programs run in, or on other programs, cores
# or devices, or that the interpreter reports per program: a kernel using any of them is
# interpreted instead.
ORDER_DEPENDENT = {
    "dma_start": "DMAs (make_async_copy / emit_pipeline)",
    "dma_wait": "DMAs (make_async_copy / emit_pipeline)",
    "semaphore_signal": "semaphores",
    "semaphore_wait": "semaphores",
    "semaphore_read": "semaphores",
    "get_barrier_semaphore": "barrier semaphores",
    "atomic_rmw": "atomics",
    "atomic_cas": "atomics",
    "debug_print": "debug prints (their order is the program order)",
    "debug_callback": "host callbacks (their order is the program order)",
    "io_callback": "host callbacks (their order is the program order)",
    "check": "debug checks (`pl.debug_check`, reported per program by the interpreter)",
    "prng_seed": "the stateful TPU PRNG",
    "prng_random_bits": "the stateful TPU PRNG",
    "device_id": "device ids (multi-device kernels)",
    "axis_index": "mesh axis indices",
    "pallas_call": "a nested pallas_call",
    "while": "a while loop, which may spin",
}


def order_dependent_primitive(eqn: Any) -> str | None:
    """What in the kernel body (at any depth) makes its programs' order matter, or None."""
    for name in _primitive_names(eqn.params["jaxpr"]):
        if name in ORDER_DEPENDENT:
            return f"{ORDER_DEPENDENT[name]} (`{name}`)"  # e.g. "semaphores (`semaphore_wait`)"
    return None


def written_inputs(eqn: Any) -> tuple[int, ...]:
    """Positions (among the kernel's inputs) of input refs the body writes."""
    from jax._src import state

    gm = eqn.params["grid_mapping"]
    jaxpr = eqn.params["jaxpr"]
    # In a jaxpr's effects, `input` is the invar written (see jax's JaxprInputEffect).
    position = {id(v): i for i, v in enumerate(jaxpr.invars)}
    written = {position[id(eff.input)] for eff in jaxpr.effects
               if isinstance(eff, state.WriteEffect | state.AccumEffect)
               and id(eff.input) in position}
    first = gm.num_index_operands
    return tuple(i - first for i in sorted(written)
                 if first <= i < first + gm.num_inputs)


def _primitive_names(jaxpr: Any) -> dict[str, None]:
    """Primitive names in the body, in program order (at any depth), without repeats."""
    names: dict[str, None] = {}
    for eqn in jaxpr.eqns:
        names.setdefault(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple) else (value,):
                if isinstance(sub, jax_core.Jaxpr):
                    names.update(_primitive_names(sub))
    return names

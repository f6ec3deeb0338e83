"""A `pallas_call` run as one batched XLA computation: the discharged kernel body `vmap`ped
over the programs of the batched grid dimensions and `scan`ned over the others in row-major
order, blocks gathered and scattered with the index maps' start indices.

This mirrors JAX's HLO interpreter (`interpret=True`) — the same discharged body, start
indices, padding, uninitialized values and aliasing — except that the programs of one scan
step run at once. The caller (`pallaslab.execute.vectorized`) decides which dimensions may be
batched; this module only does what it is told.
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

from pallaslab.model._jax.base import Jaxpr
from pallaslab.model._jax.rewrite import eval_replacing


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """Which grid dimensions one kernel's programs are batched over (the rest are scanned)."""

    batched_dims: tuple[int, ...]
    # Per output: its block stays the same across the scanned steps of every lane (a
    # reduction's accumulator block), so it is carried through the scan as blocks and
    # written back once, instead of gathered and scattered at every step.
    carried_outputs: tuple[bool, ...] = ()


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
    p = eqn.params
    gm = p["grid_mapping"]
    if gm.num_dynamic_grid_bounds:
        raise NotImplementedError("dynamic grid bounds")
    grid = tuple(int(g) for g in gm.grid)
    aliases = tuple(p["input_output_aliases"])
    body, consts, scratch_avals = hlo.kernel_to_hlo_jaxpr(p["jaxpr"], (), gm)
    scalars = tuple(args[gm.slice_index_ops])
    block_args = list(args[len(scalars):])
    outs = hlo._initialize_output_vals(gm.block_mappings_output, block_args, aliases)
    n_in = len(block_args)
    mappings = gm.block_mappings
    shapes = [pallas_core._get_block_shape(bm.block_shape) for bm in mappings]
    squeezed = [tuple(isinstance(d, pallas_core.Squeezed) for d in bm.block_shape)
                for bm in mappings]
    arrays = [hlo._pad_to_block_dimension(x, s)
              for x, s in zip([*block_args, *outs], shapes, strict=True)]
    inputs, out_arrays = arrays[:n_in], arrays[n_in:]
    n_scalars = len(scalars)
    aliased = {i - n_scalars: o for i, o in aliases
               if arrays[i - n_scalars].shape == arrays[n_in + o].shape}

    batched = tuple(sorted(plan.batched_dims))
    scanned = tuple(d for d in range(len(grid)) if d not in batched)
    lanes = _index_grid(grid, batched)  # (L, len(batched))
    steps = _index_grid(grid, scanned)  # (S, len(scanned))
    n_lanes = lanes.shape[0]

    def program_ids(step_ids: Any) -> Any:
        """(L, rank) program ids of the lanes at one scan step."""
        cols: list[Any] = [None] * len(grid)
        for j, d in enumerate(batched):
            cols[d] = jnp.asarray(lanes[:, j])
        for j, d in enumerate(scanned):
            cols[d] = jnp.broadcast_to(step_ids[j], (n_lanes,))
        return jnp.stack(cols, axis=1) if cols else jnp.zeros((n_lanes, 0), jnp.int32)

    def starts_of(pids: Any) -> list[Any]:
        def one(pid: Any) -> list[Any]:
            ids = tuple(pid[d] for d in range(len(grid)))
            with pallas_core.grid_env(_grid_env(gm, ids, grid)):
                return [jnp.stack([jnp.asarray(s, jnp.int32) for s in
                                   bm.compute_start_indices_interpret(ids, *scalars)])
                        if bm.block_shape else jnp.zeros((0,), jnp.int32) for bm in mappings]
        return jax.vmap(one)(pids)

    def program(pid: Any, in_blocks: list[Any], scratch: list[Any]) -> list[Any]:
        ids = tuple(pid[d] for d in range(len(grid)))
        with pallas_core.grid_env(_grid_env(gm, ids, grid)):
            return jax_core.eval_jaxpr(body, consts, *scalars, *in_blocks, *scratch)

    n_out = len(out_arrays)
    carried = [bool(c) and j not in aliased.values()
               for j, c in enumerate(plan.carried_outputs or (False,) * n_out)]

    def gather(i: int, array: Any, starts: list[Any]) -> Any:
        return jax.vmap(_slicer(shapes[i], squeezed[i], array))(starts[i])

    def step(carry: tuple[list[Any], list[Any], list[Any]], step_ids: Any
             ) -> tuple[tuple[list[Any], list[Any], list[Any]], None]:
        out_arrays, out_blocks, scratch = carry
        pids = program_ids(step_ids)
        starts = starts_of(pids)
        # An aliased input reads the output's current contents: the interpreter copies each
        # step's output writes into the aliased input (the caller refuses written inputs).
        current = [out_arrays[aliased[i]] if i in aliased else x for i, x in enumerate(inputs)]
        blocks = [gather(i, x, starts) for i, x in enumerate(current)] + [
            out_blocks[j] if carried[j] else gather(n_in + j, out_arrays[j], starts)
            for j in range(n_out)]
        results = jax.vmap(program)(pids, blocks, scratch)
        new_blocks = results[n_scalars:n_scalars + len(mappings)]
        new_scratch = list(results[n_scalars + len(mappings):])
        new_outs = [out_arrays[j] if carried[j] else
                    _scatter(out_arrays[j], new_blocks[n_in + j], starts[n_in + j],
                             shapes[n_in + j], squeezed[n_in + j]) for j in range(n_out)]
        kept = [new_blocks[n_in + j] if carried[j] else out_blocks[j] for j in range(n_out)]
        return (new_outs, kept, new_scratch), None

    scratch0 = [jnp.broadcast_to(pallas_primitives.uninitialized_value(a.shape, a.dtype),
                                 (n_lanes, *a.shape)) for a in scratch_avals]
    first = starts_of(program_ids(jnp.asarray(steps[0])))
    blocks0 = [gather(n_in + j, out_arrays[j], first) if carried[j] else jnp.zeros((0,))
               for j in range(n_out)]
    (final, blocks, _), _ = jax.lax.scan(step, (out_arrays, blocks0, scratch0),
                                         jnp.asarray(steps))
    final = [_scatter(o, blocks[j], first[n_in + j], shapes[n_in + j], squeezed[n_in + j])
             if carried[j] else o for j, o in enumerate(final)]
    return [o[tuple(slice(0, s) for s in bm.array_aval.shape)] if o.shape != bm.array_aval.shape
            else o for o, bm in zip(final, gm.block_mappings_output, strict=True)]


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


def _slicer(shape: tuple[int, ...], squeezed: tuple[bool, ...], array: Any
            ) -> Callable[[Any], Any]:
    def take(start: Any) -> Any:
        return hlo._dynamic_slice(tuple(start[i] for i in range(len(shape))), shape, array,
                                  squeezed)
    return take


def _scatter(array: Any, blocks: Any, starts: Any, shape: tuple[int, ...],
             squeezed: tuple[bool, ...]) -> Any:
    """Write each lane's block back at its start: one XLA scatter (the caller batches only
    programs that write distinct blocks, so no two lanes overlap)."""
    kept = tuple(i for i, s in enumerate(squeezed) if not s)
    full = jax.vmap(lambda b: jax.lax.broadcast_in_dim(b, shape, kept))(blocks)
    # dynamic_update_slice clamps starts so the block fits: do the same before scattering
    limit = jnp.asarray(array.shape, jnp.int32) - jnp.asarray(shape, jnp.int32)
    clamped = jnp.clip(starts.astype(jnp.int32), 0, limit)
    dnums = jax.lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(1, len(shape) + 1)), inserted_window_dims=(),
        scatter_dims_to_operand_dims=tuple(range(len(shape))))
    return jax.lax.scatter(array, clamped, full, dnums, indices_are_sorted=False,
                           unique_indices=True,
                           mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)

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

"""`pl.BoundedSlice` windows at their own size: a `pallas_call` whose block specs have a
varying-size window, run grid step by grid step as the TPU pipeline copies it.

JAX's interpreters stop at such a kernel: the HLO interpreter cannot turn a `pl.ds(start,
size)` from an index map into a block's start ("Unsupported block dim type: BoundedSlice"),
and TPU interpret mode fails inside its own code. (Inside a kernel, `pltpu.emit_pipeline`
copies such windows by DMAs of a traced size: `traced_size_copies`.) `BoundedSlice(n)` is
documented (`pl.BoundedSlice`, and Mosaic's pipeline copies it so): the kernel's ref has the
static size `n`; the index map returns `pl.ds(start, size)` with `size <= n`; the pipeline
copies rows `[start, start + size)` of the array into the block's first `size` rows, and an
output block's first `size` rows back. The rows past `size` are undefined.

This module gives pallaslab's own interpreted run that rule, as a replacement of the
`pallas_call` equation in the executor's copy of the jaxpr (no rule of JAX's is registered or
replaced; the user's own `interpret=True` run is untouched). The grid runs in order, one
program at a time, like `interpret=True`: each input block is read at its own window, its
undefined rows filled as `interpret=True` fills uninitialized memory (NaN for floats, the
minimum for integers) so a kernel that reads them shows it; each output block writes back
only its window's rows. Not modelled: what a real TPU leaves in the undefined rows (the
previous step's data), a window's size above its bound (Mosaic's behaviour there is
undefined; here it is clipped to the bound), and any rounding of the copies to the memory's
tiling (emit_pipeline rounds its copies up; here exactly the window's rows move).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import reduce
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax._src import core as jax_core
from jax._src import tree_util
from jax._src.pallas import core as pallas_core
from jax._src.pallas import hlo_interpreter
from jax._src.pallas import primitives as pallas_primitives
from jax._src.state import discharge as state_discharge

from pallaslab.model._jax import rewrite

NOTE = ("pl.BoundedSlice windows run at their own size, as the TPU pipeline copies them: "
        "each input block holds its window's rows (the rows past the window's size are "
        "undefined, filled here with NaN / the integer minimum), each output block writes "
        "back only its window's rows; what a TPU leaves in the undefined rows is not modelled")


def has_bounded_slices(eqn: Any) -> bool:
    """Is this a `pallas_call` equation with a `pl.BoundedSlice` block dimension?"""
    mapping = eqn.params.get("grid_mapping") if eqn.primitive.name == "pallas_call" else None
    return mapping is not None and any(
        isinstance(d, pallas_core.BoundedSlice)
        for bm in mapping.block_mappings for d in bm.block_shape)


def run_notes(eqns: Iterable[Any]) -> tuple[str, ...]:
    """The note a run of these kernel equations carries: `NOTE` when one has a window."""
    return (NOTE,) if any(has_bounded_slices(e) for e in eqns) else ()


def unsupported(eqn: Any) -> str | None:
    """Why `run` cannot run this equation (None: it can)."""
    mapping = eqn.params["grid_mapping"]
    if mapping.num_dynamic_grid_bounds:
        return "a dynamic grid"
    for bm in mapping.block_mappings:
        for d in bm.block_shape:
            if isinstance(d, pallas_core.Element) and d.padding != (0, 0):
                return "a padded pl.Element block dimension"
            if isinstance(d, pallas_core.Indirect):
                return "a pl.Indirect block dimension"
    return None


def with_windows(closed_jaxpr: Any) -> Any:
    """`closed_jaxpr` with each `pallas_call` that has a `pl.BoundedSlice` window replaced by
    `run` (unchanged when none has one)."""
    if not rewrite.contains(closed_jaxpr, has_bounded_slices):
        return closed_jaxpr
    return rewrite.retrace_replacing(closed_jaxpr, has_bounded_slices, run)


def is_semaphore(aval: Any) -> bool:
    """Is this aval a semaphore's (`pltpu.SemaphoreType.DMA` / `REGULAR`)?"""
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, pallas_core.semaphore_dtype)


def _uninitialized(shape: tuple[int, ...], dtype: Any) -> Any:
    if jnp.issubdtype(dtype, pallas_core.semaphore_dtype):  # a semaphore's count: zero
        return jnp.zeros(shape, pallas_core.SEMAPHORE_INTERPRET_DTYPE)
    return pallas_primitives.uninitialized_value(shape, dtype)


def _window(bm: Any, values: list[Any]) -> tuple[list[Any], list[Any | None]]:
    """Each dimension's start in the array and, for a `BoundedSlice`, its window's size."""
    dims = tree_util.tree_unflatten(bm.index_map_out_tree, values)
    starts: list[Any] = []
    sizes: list[Any | None] = []
    for d, v in zip(bm.block_shape, dims, strict=True):
        match d:
            case pallas_core.BoundedSlice(block_size=n):
                if v.stride != 1:
                    raise NotImplementedError("a strided pl.BoundedSlice window")
                starts.append(jnp.asarray(v.start, jnp.int32))
                sizes.append(jnp.clip(jnp.asarray(v.size, jnp.int32), 0, n))
            case pallas_core.Blocked(block_size=n):
                starts.append(jnp.asarray(v, jnp.int32) * n)
                sizes.append(None)
            case _:  # Element, Squeezed: the index is the start
                starts.append(jnp.asarray(v, jnp.int32))
                sizes.append(None)
    return starts, sizes


def _valid(shape: tuple[int, ...], sizes: list[Any | None]) -> Any:
    """The mask of a block's rows inside its windows."""
    mask = jnp.ones(shape, bool)
    for axis, size in enumerate(sizes):
        if size is not None:
            mask &= lax.broadcasted_iota(jnp.int32, shape, axis) < size
    return mask


def run(eqn: Any, args: list[Any]) -> list[Any]:
    """The `pallas_call` equation `eqn` applied to `args`, grid step by grid step, every
    `pl.BoundedSlice` window at its own size (see the module's docstring). A semaphore
    operand (in or out) is its count, an array of JAX's interpreted semaphore dtype, as the
    interpreter's DMA rules count it (`cross_call_semaphores` passes them between calls)."""
    if (why := unsupported(eqn)) is not None:
        raise NotImplementedError(f"pl.BoundedSlice windows beside {why}")
    params = eqn.params
    mapping = params["grid_mapping"]
    grid = tuple(mapping.grid)
    n_scalars = mapping.num_index_operands
    scalars = [s.astype(jnp.int32) if isinstance(s.dtype, jax_core.bint) else s
               for s in args[:n_scalars]]
    block_args = list(args[n_scalars:])
    n_in = len(block_args)
    # input k (of the block operands) -> the output it aliases, and back
    alias_of = {i - n_scalars: o for i, o in params["input_output_aliases"]}
    aliased_by = {o: k for k, o in alias_of.items()}
    mappings = list(mapping.block_mappings)
    body, body_consts, scratch_avals = hlo_interpreter.kernel_to_hlo_jaxpr(
        params["jaxpr"], (), mapping)
    index_maps = [state_discharge.discharge_state(bm.index_map_jaxpr, strip_memory_space=True)
                  for bm in mappings]
    block_shapes = [pallas_core._get_block_shape(bm.block_shape) for bm in mappings]
    squeezed = [tuple(i for i, d in enumerate(bm.block_shape)
                      if isinstance(d, pallas_core.Squeezed)) for bm in mappings]

    sems = [is_semaphore(bm.array_aval) for bm in mappings]

    def padded(x: Any, shape: tuple[int, ...]) -> Any:
        # a block size of padding past every end: a window is read and written where it
        # is, never clamped back into the array as `dynamic_slice` would
        if jnp.issubdtype(x.dtype, pallas_core.SEMAPHORE_INTERPRET_DTYPE) or \
                jnp.issubdtype(x.dtype, pallas_core.semaphore_dtype):
            return x
        return jnp.pad(x, [(0, b) for b in shape],
                       constant_values=_uninitialized((), x.dtype))

    outs = [block_args[aliased_by[j]] if j in aliased_by else
            _uninitialized(bm.array_aval.shape, bm.array_aval.dtype)
            for j, bm in enumerate(mapping.block_mappings_output)]
    arrays = [padded(x, s) for x, s in zip([*block_args, *outs], block_shapes, strict=True)]
    scratch = [_uninitialized(a.shape, a.dtype) for a in scratch_avals]
    total = reduce(lambda a, b: a * b, grid, 1)

    def step(i: Any, carry: tuple[list[Any], list[Any]]) -> tuple[list[Any], list[Any]]:
        arrays, scratch = carry
        loop_idx = list(jnp.unravel_index(i, grid)) if grid else []
        loop_idx = [jnp.asarray(g, jnp.int32) for g in loop_idx]
        env = (mapping.local_grid_env(loop_idx, grid) if mapping.local_grid_env is not None
               else tuple(pallas_core.GridAxis(idx, b)
                          for dim, (idx, b) in enumerate(zip(loop_idx, grid, strict=True))
                          if dim not in mapping.vmapped_dims))
        with pallas_core.grid_env(env):
            windows = []
            for bm, index_map in zip(mappings, index_maps, strict=True):
                flat = jax_core.jaxpr_as_fun(index_map)(*loop_idx, *scalars)
                windows.append(_window(bm, list(flat[:len(bm.index_map_jaxpr.outvars)])))
            blocks = []
            for k, ((starts, sizes), shape, sq) in enumerate(
                    zip(windows, block_shapes, squeezed, strict=True)):
                # an aliased input reads the output buffer it shares
                source = arrays[n_in + alias_of[k]] if k in alias_of else arrays[k]
                block = lax.dynamic_slice(source, starts, shape)
                if not sems[k]:
                    block = jnp.where(_valid(shape, sizes), block,
                                      _uninitialized(shape, block.dtype))
                blocks.append(lax.squeeze(block, sq))
            results = jax_core.eval_jaxpr(body, body_consts, *scalars, *blocks, *scratch)
        written = results[n_scalars:n_scalars + len(blocks)]
        new_scratch = results[n_scalars + len(blocks):]
        new_arrays = list(arrays)
        for k in range(n_in, len(mappings)):  # outputs only: a TPU copies no input back
            starts, sizes = windows[k]
            shape = block_shapes[k]
            keep = [a for a in range(len(shape)) if a not in squeezed[k]]
            value = lax.broadcast_in_dim(written[k], shape, keep)
            old = lax.dynamic_slice(arrays[k], starts, shape)
            value = jnp.where(_valid(shape, sizes), value.astype(old.dtype), old)
            new_arrays[k] = lax.dynamic_update_slice(arrays[k], value, starts)
        return new_arrays, list(new_scratch)

    arrays, _ = jax.lax.fori_loop(0, total, step, (arrays, scratch))
    return [lax.slice(a, (0,) * a.ndim, bm.array_aval.shape)
            for a, bm in zip(arrays[n_in:], mapping.block_mappings_output, strict=True)]

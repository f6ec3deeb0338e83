"""Which output elements each program of a kernel really stores (masks and `pl.ds` included).

Triton kernels see whole-array refs and store through masked, offset indexers, so their
BlockSpec windows say nothing about who writes what. Here every program runs on its own copy
of the operands (the kernel body evaluated with `run_state`, programs `vmap`ped a chunk at a
time, their ids set through Pallas's grid environment), and each plain store into an output
ref is repeated into a shadow ref with the same indexer and mask: the shadow holds the
elements the program stored. Atomic read-modify-writes are not repeated: programs may share
elements through atomics by design.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src import linear_util as lu
from jax._src.interpreters import partial_eval as pe
from jax._src.state import discharge as state_discharge
from jax._src.state.types import AbstractRef

from pallaslab.model._jax.rewrite import eval_replacing

STORES = ("masked_swap", "swap")  # pl.store / ref[...] = x
ATOMICS = ("atomic_rmw", "atomic_cas")  # programs may share elements through these by design
LANE_BUDGET = 1 << 27  # bytes of shadow arrays per chunk of programs


@dataclasses.dataclass(frozen=True)
class StoredElements:
    """Per output element: how many programs stored it, and the first and last of them."""

    count: np.ndarray  # int32, output shape
    first: np.ndarray  # int32 program step (row-major), -1 where none
    last: np.ndarray


def whole_array_kernel(eqn: Any) -> bool:
    """Does every operand's block cover its whole array at index 0 (Triton's usual style)?"""
    gm = eqn.params["grid_mapping"]
    return not gm.num_dynamic_grid_bounds and all(
        bm.has_trivial_window() for bm in gm.block_mappings)


def stored_elements(eqn: Any, operands: Sequence[Any]) -> list[StoredElements]:
    """For each output of a whole-array kernel equation bound on `operands` (scalar prefetch
    then inputs), the programs storing each element."""
    p = eqn.params
    gm = p["grid_mapping"]
    grid = tuple(int(g) for g in gm.grid)
    out_avals = [bm.array_aval for bm in gm.block_mappings_output]
    body = _instrumented_body(p["jaxpr"], gm, grid)
    scratch = [v.aval.inner_aval for v in p["jaxpr"].invars[gm.slice_scratch_ops]]
    init = [*operands, *[jnp.zeros(a.shape, a.dtype) for a in out_avals],
            *[jnp.zeros(a.shape, a.dtype) for a in scratch],
            *[jnp.zeros(a.shape, jnp.int32) for a in out_avals]]
    n_out = len(out_avals)

    def program(pid: Any) -> list[Any]:
        return jax_core.eval_jaxpr(body, body.consts, pid, *init)[-n_out:]

    run = jax.jit(jax.vmap(program))
    out_bytes = sum(math.prod(a.shape) for a in out_avals) * 4
    lanes = max(1, min(math.prod(grid), LANE_BUDGET // max(out_bytes, 1)))
    ids = np.asarray(list(itertools.product(*(range(g) for g in grid))), np.int32)
    ids = ids.reshape(max(1, math.prod(grid)), len(grid))
    count = [np.zeros(a.shape, np.int32) for a in out_avals]
    first = [np.full(a.shape, -1, np.int32) for a in out_avals]
    last = [np.full(a.shape, -1, np.int32) for a in out_avals]
    for start in range(0, len(ids), lanes):
        chunk = ids[start:start + lanes]
        steps = np.arange(start, start + len(chunk), dtype=np.int32)
        for j, marks in enumerate(run(jnp.asarray(chunk))):
            m = np.asarray(marks) > 0
            at = steps.reshape(-1, *([1] * (m.ndim - 1)))
            count[j] += m.sum(axis=0, dtype=np.int32)
            earliest = np.where(m, at, np.iinfo(np.int32).max).min(axis=0)
            first[j] = np.where((first[j] < 0) & m.any(axis=0), earliest, first[j])
            last[j] = np.maximum(last[j], np.where(m, at, -1).max(axis=0))
    return [StoredElements(c, f, la) for c, f, la in zip(count, first, last, strict=True)]


def _instrumented_body(body: Any, gm: Any, grid: tuple[int, ...]) -> Any:
    """The kernel body as a pure jaxpr `(program ids, *operand values, *shadows) -> final
    values`: program ids are an input, and every store into an output ref is repeated as a
    store of ones into that output's shadow."""
    n_out = gm.num_outputs
    first_out = gm.num_index_operands + gm.num_inputs
    kept = [d for d in range(len(grid)) if d not in gm.vmapped_dims]  # program_id's axes

    def fn(pid: Any, *refs: Any) -> list[Any]:
        values, shadows = list(refs[:-n_out]), refs[-n_out:]
        out_refs = values[first_out:first_out + n_out]

        def matches(e: Any) -> bool:
            return e.primitive.name in (*STORES, *ATOMICS, "program_id", "num_programs")

        def replace(e: Any, invals: list[Any]) -> list[Any]:
            name = e.primitive.name
            if name in ATOMICS:  # not stores here (and XCHG has no rule off a GPU): skipped,
                # their results (the old values) read as zeros
                return [jnp.zeros(v.aval.shape, v.aval.dtype) for v in e.outvars]
            if name == "program_id":
                return [pid[kept[e.params["axis"]]]]
            if name == "num_programs":
                return [jnp.int32(grid[kept[e.params["axis"]]])]
            outs = e.primitive.bind(*invals, **e.params)
            for ref, shadow in zip(out_refs, shadows, strict=True):
                if invals[0] is ref:
                    _store_marks(e, invals, shadow)
            return list(outs) if e.primitive.multiple_results else [outs]

        eval_replacing(body, body.consts, values, matches, replace)
        return []

    avals = [jax_core.ShapedArray((len(grid),), jnp.int32), *[v.aval for v in body.invars],
             *[AbstractRef(jax_core.ShapedArray(bm.array_aval.shape, jnp.int32))
               for bm in gm.block_mappings_output]]
    traced, _, consts = pe.trace_to_jaxpr_dynamic(
        lu.wrap_init(fn, debug_info=body.debug_info.with_unknown_names()), avals)
    return state_discharge.discharge_state(traced.with_consts(consts),
                                           strip_memory_space=True)


def _store_marks(eqn: Any, invals: list[Any], shadow: Any) -> None:
    """Repeat a store into `shadow` with the same indexer (and mask), storing ones."""
    tree = eqn.params.get("args_tree") or eqn.params.get("tree")
    if eqn.primitive.name == "masked_swap":
        _, transforms, val, mask = tree.unflatten(invals)
        leaves, new_tree = jax.tree.flatten((shadow, transforms, jnp.ones(val.shape, jnp.int32),
                                             mask))
        eqn.primitive.bind(*leaves, **{**eqn.params, "args_tree": new_tree})
    else:  # state swap: (ref, value, *indexer leaves)
        _, val, *rest = invals
        eqn.primitive.bind(shadow, jnp.ones(val.shape, jnp.int32), *rest, **eqn.params)


def sample_operands(eqn: Any, prefetch: Sequence[Any]) -> list[Any]:
    """Operands to evaluate stores with: the captured scalar-prefetch values, seeded inputs
    (floats normal, integers zero, booleans false)."""
    gm = eqn.params["grid_mapping"]
    avals = [v.aval for v in eqn.invars][gm.num_dynamic_grid_bounds:]
    out = list(prefetch)
    key = jax.random.key(0)
    for aval in avals[len(out):]:
        key, sub = jax.random.split(key)
        floating = jnp.issubdtype(aval.dtype, jnp.floating)
        out.append(jax.random.normal(sub, aval.shape, jnp.float32).astype(aval.dtype)
                   if floating else jnp.zeros(aval.shape, aval.dtype))
    return out

"""Facts of a pallas_call equation the static verdicts need, read from JAX's own records:
how the body writes each output (the reference effects, `WriteEffect`, JAX records on every
equation of the kernel body), each output BlockSpec's pipeline mode
(`pl.Buffered(..., revisit=pl.RevisitMode.ANY)`), and whether the call asks for an interpreter.

How an output is written, per output origin, as a set of kinds:
- "store": `ref[...] = x`, `pl.store`, `ref[...] += x` (plain writes);
- "atomic": `atomic_rmw` / `atomic_cas` (add, max, xchg, cas: read-modify-writes);
- "dma": a DMA into it (`pltpu.async_copy`, `sync_copy`, nested pipelines' write-backs);
- "other": any other write JAX records (a nested call, a primitive we do not know): the
  analyses then assume nothing about it.
An empty set: the body never writes the output, knowable without running it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jax._src import core as jax_core
from jax._src.pallas import core as pallas_core
from jax._src.state import types as state_types

STORES = ("swap", "masked_swap", "addupdate")
ATOMICS = ("atomic_rmw", "atomic_cas")
DMAS = ("dma_start", "tma_async_copy", "copy_gmem_to_smem", "copy_smem_to_gmem")
_WRITES = (state_types.WriteEffect, state_types.AccumEffect)


def output_write_kinds(eqn: Any) -> dict[str, frozenset[str]]:
    """Output origin -> how the kernel body of a pallas_call equation writes it."""
    gm = eqn.params["grid_mapping"]
    body = eqn.params["jaxpr"]
    first = gm.num_index_operands + gm.num_inputs
    outputs = gm.block_mappings[gm.num_inputs:gm.num_inputs + gm.num_outputs]
    refs = body.invars[first:first + gm.num_outputs]
    return {str(bm.origin): frozenset(_write_kinds(body, ref))
            for bm, ref in zip(outputs, refs, strict=True)}


def revisit_any_outputs(eqn: Any) -> frozenset[str]:
    """Origins of the outputs whose BlockSpec asks `pl.Buffered(..., revisit=RevisitMode.ANY)`:
    Mosaic restores the block from HBM when it is revisited, so any visit order is safe."""
    gm = eqn.params["grid_mapping"]
    outputs = gm.block_mappings[gm.num_inputs:gm.num_inputs + gm.num_outputs]
    return frozenset(str(bm.origin) for bm in outputs
                     if getattr(bm.pipeline_mode, "revisit", None) is pallas_core.RevisitMode.ANY)


def interpreted(eqn: Any) -> bool:
    """Was the pallas_call written with `interpret=True` (or interpret params)?"""
    return bool(eqn.params.get("interpret"))


def _write_kinds(jaxpr: Any, ref: Any) -> Iterator[str]:
    """The kinds of the writes into `ref` (a variable of `jaxpr`), at any depth."""
    for eqn in jaxpr.eqns:
        if not any(isinstance(e, _WRITES) and e.input is ref for e in eqn.effects):
            continue
        name = eqn.primitive.name
        if name in STORES:
            yield "store"
        elif name in ATOMICS:
            yield "atomic"
        elif name in DMAS:
            yield "dma"
        elif (inner := list(_inner_writes(eqn, ref))):
            yield from inner
        else:
            yield "other"


def _inner_writes(eqn: Any, ref: Any) -> Iterator[str]:
    """The writes into `ref` inside the sub-jaxprs of `eqn` (cond branches, loop bodies,
    jit, run_scoped, ...). An operand of `eqn` is matched to the sub-jaxpr's inputs from the
    end (cond's predicate and a while loop's condition consts come first); a sub-jaxpr that
    does not line up (different reference types) yields nothing, so the write is "other"."""
    positions = [i for i, v in enumerate(eqn.invars) if v is ref]
    for sub in _sub_jaxprs(eqn.params):
        offset = len(eqn.invars) - len(sub.invars)
        for i in positions:
            j = i - offset
            if 0 <= j < len(sub.invars) and sub.invars[j].aval == ref.aval:
                yield from _write_kinds(sub, sub.invars[j])


def _sub_jaxprs(params: Any) -> Iterator[Any]:
    for value in params.values():
        for sub in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(sub, jax_core.Jaxpr):
                yield sub
            elif isinstance(getattr(sub, "jaxpr", None), jax_core.Jaxpr):
                yield sub.jaxpr

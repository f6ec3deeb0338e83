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

Spin locks (`lock_guarded_outputs`): an output whose every plain load and store lies in a
critical section of one lock, taken by a while loop spinning on `atomic_cas` of a scalar ref
and released by an unmasked `atomic_xchg` of the same ref later in the same jaxpr.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from jax._src import core as jax_core
from jax._src.pallas import core as pallas_core
from jax._src.state import types as state_types

from pallaslab.model._jax.equation_fields import call_site_of

STORES = ("swap", "masked_swap", "addupdate")
ATOMICS = ("atomic_rmw", "atomic_cas")
DMAS = ("dma_start", "tma_async_copy", "copy_gmem_to_smem", "copy_smem_to_gmem")
_WRITES = (state_types.WriteEffect, state_types.AccumEffect)
_ACCESSES = (*_WRITES, state_types.ReadEffect)


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


# --- spin locks ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LockedStores:
    """An output whose every plain load and store sits in a critical section of one spin lock:
    the programs that share its elements store them in turn, one holder at a time."""

    lock: int  # the lock ref's position in the kernel body (Pallas's operand order)
    acquires: tuple[str, ...]  # "path.py:LINE" of the loops spinning on atomic_cas
    releases: tuple[str, ...]  # ... of the atomic_xchg releasing the lock
    stores: tuple[str, ...]  # ... of the stores it guards


@dataclasses.dataclass(frozen=True)
class _Section:
    """A critical section: the equations of one jaxpr between an acquire and its release."""

    lock: int
    start: int  # index of the acquiring loop
    stop: int  # index of the releasing exchange
    acquire: str | None
    release: str | None


@dataclasses.dataclass(frozen=True)
class _Access:
    """A plain load or store of an output, and the critical section it lies in (if any)."""

    store: bool
    source: str | None
    section: _Section | None


def lock_guarded_outputs(eqn: Any) -> dict[str, LockedStores]:
    """Output origin -> its lock, for each output of a pallas_call equation that the body
    stores plainly, always inside critical sections of one spin lock (loads of it too).
    An output with a store or load outside them, or under two different locks, or written
    in a way not followed (a DMA, an unknown primitive), is left out."""
    gm = eqn.params["grid_mapping"]
    body = eqn.params["jaxpr"]
    positions = {v: i for i, v in enumerate(body.invars)}
    first = gm.num_index_operands + gm.num_inputs
    outputs = gm.block_mappings[gm.num_inputs:gm.num_inputs + gm.num_outputs]
    found: dict[str, LockedStores] = {}
    for bm, ref in zip(outputs, body.invars[first:first + gm.num_outputs], strict=True):
        locked = _locked(list(_accesses(body, ref, positions, None)))
        if locked is not None:
            found[str(bm.origin)] = locked
    return found


def _locked(accesses: list[_Access]) -> LockedStores | None:
    sections = [a.section for a in accesses]
    stores = [a for a in accesses if a.store]
    if not stores or any(s is None for s in sections):
        return None
    locks = {s.lock for s in sections if s is not None}
    if len(locks) != 1:  # two locks do not exclude each other
        return None
    return LockedStores(
        lock=locks.pop(),
        acquires=_distinct(s.acquire for s in sections if s is not None),
        releases=_distinct(s.release for s in sections if s is not None),
        stores=_distinct(a.source for a in stores))


def _distinct(sources: Iterator[str | None]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for s in sources if s is not None))


def _accesses(jaxpr: Any, ref: Any, positions: dict[Any, int],
              outer: _Section | None) -> Iterator[_Access]:
    """The plain loads and stores of `ref` in `jaxpr`, at any depth, each with the critical
    section around it (`outer`: the one around the whole jaxpr). Atomics are left out (they
    never race); a write not followed is an access outside any section."""
    sections = _critical_sections(jaxpr, positions)
    for i, eqn in enumerate(jaxpr.eqns):
        effects = [e for e in eqn.effects if isinstance(e, _ACCESSES) and e.input is ref]
        if not effects or eqn.primitive.name in ATOMICS:
            continue
        section = outer or next((s for s in sections if s.start < i < s.stop), None)
        writes = any(isinstance(e, _WRITES) for e in effects)
        plain_load = not writes and not list(_sub_jaxprs(eqn.params))  # get, load, ...
        if eqn.primitive.name in STORES or plain_load:
            yield _Access(writes, call_site_of(eqn), section)
            continue
        inner = list(_inner_refs(eqn, ref, positions))
        if not inner:  # a DMA, an unknown write: nothing is assumed about it
            yield _Access(True, call_site_of(eqn), None)
        for sub, sub_ref, sub_positions in inner:
            yield from _accesses(sub, sub_ref, sub_positions, section)


def _inner_refs(eqn: Any, ref: Any, positions: dict[Any, int]
                ) -> Iterator[tuple[Any, Any, dict[Any, int]]]:
    """(sub-jaxpr, `ref` in it, the kernel operands' positions of its inputs) for each
    sub-jaxpr of `eqn` that `ref` is passed to."""
    for sub, operands in _aligned(eqn):
        matched = {inner: positions[v] for inner, v in zip(sub.invars, operands, strict=True)
                   if isinstance(v, jax_core.Var) and v in positions and inner.aval == v.aval}
        for inner_ref in (w for w, p in matched.items() if p == positions.get(ref)):
            yield sub, inner_ref, matched  # every name the sub-jaxpr gives the output


def _aligned(eqn: Any) -> Iterator[tuple[Any, list[Any]]]:
    """Each sub-jaxpr of `eqn` with the operands of `eqn` its inputs receive (None where
    none does). A while loop's condition and body get their own consts before the carry;
    other equations are matched from the end (cond's predicate comes first)."""
    p = eqn.params
    if eqn.primitive.name == "while":
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        carry = eqn.invars[cn + bn:]
        yield p["cond_jaxpr"].jaxpr, [*eqn.invars[:cn], *carry]
        yield p["body_jaxpr"].jaxpr, [*eqn.invars[cn:cn + bn], *carry]
        return
    for sub in _sub_jaxprs(p):
        offset = len(eqn.invars) - len(sub.invars)
        yield sub, [eqn.invars[i] if i >= 0 else None
                    for i in range(offset, offset + len(sub.invars))]


def _critical_sections(jaxpr: Any, positions: dict[Any, int]) -> list[_Section]:
    """Each acquire of a lock followed, in the same jaxpr, by its release."""
    taken: dict[int, tuple[int, str | None]] = {}
    sections = []
    for i, eqn in enumerate(jaxpr.eqns):
        if (lock := _acquired(eqn, positions)) is not None:
            taken[lock] = (i, call_site_of(eqn))
        elif (lock := _released(eqn, positions)) is not None and lock in taken:
            start, acquire = taken.pop(lock)
            sections.append(_Section(lock, start, i, acquire, call_site_of(eqn)))
    return sections


def _acquired(eqn: Any, positions: dict[Any, int]) -> int | None:
    """The lock a `while` equation takes: its condition spins on `atomic_cas` of a ref it
    closes over (`while atomic_cas(lock, 0, 1) != 0: pass`), or its body does and the
    condition tests the result (`while_loop(lambda held: held != 0, cas_again, 1)`)."""
    if eqn.primitive.name != "while":
        return None
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    for jaxpr, refs in ((p["cond_jaxpr"].jaxpr, eqn.invars[:cn]),
                        (p["body_jaxpr"].jaxpr, eqn.invars[cn:cn + bn])):
        consts = jaxpr.invars[:len(refs)]
        for inner in jaxpr.eqns:
            if inner.primitive.name == "atomic_cas" and inner.invars[0] in consts:
                return positions.get(refs[consts.index(inner.invars[0])])
    return None


def _released(eqn: Any, positions: dict[Any, int]) -> int | None:
    """The lock an unmasked `atomic_xchg` of a whole scalar ref releases."""
    if eqn.primitive.name != "atomic_rmw" or \
            getattr(eqn.params.get("atomic_type"), "name", None) != "XCHG":
        return None
    ref, _, _, mask = eqn.params["args_tree"].unflatten(eqn.invars)
    if mask is not None or getattr(ref.aval, "shape", None) != ():  # one whole lock
        return None
    return positions.get(ref)

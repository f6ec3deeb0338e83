"""Triton atomics in program order: a kernel body's `atomic_rmw` / `atomic_cas` equations
rewritten as a load and a (masked) store of the same ref, before pallaslab's own interpreted
run (`interpret=True` runs the grid's programs one after another, in grid order).

JAX's HLO interpreter discharges only some atomics itself: not one on a rank-0 ref (its rule
unpacks an index that is not there: "not enough values to unpack"), not `atomic_xchg`,
`atomic_and`, `atomic_or`, `atomic_xor` ("AtomicOpType.XCHG"), not a masked atomic. The
rewrite gives every one the semantics Triton's lowering gives it (`tt.atomic_rmw` /
`tt.atomic_cas`): the old value comes back, the op's result is written where the mask holds
(`val` broadcast to the indexed shape), out-of-bounds lanes as a masked `pl.store` treats
them in interpret mode. Since programs run one at a time, each atomic is applied whole, in
program order: a spin lock taken by `atomic_cas` is always free when a program reaches it (the
previous program released it), so it never spins. What is *not* modelled is the order of
concurrent atomics on a GPU (float sums can round differently there). Two lanes of one add,
max or min hitting the same element both apply (a histogram counts every lane, as a scatter
does); for xchg, and, or and xor the last lane wins, and every lane gets the value from before
the atomic back.

Only the rewritten copy of the kernel's jaxpr changes: no rule of JAX's is registered or
replaced, so the user's own `interpret=True` runs are untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax.numpy as jnp
from jax._src import tree_util
from jax._src.pallas import primitives as pallas_primitives
from jax._src.state import discharge, indexing

from pallaslab.model._jax import rewrite

ATOMICS = ("atomic_rmw", "atomic_cas")

NOTE = ("atomics applied in program order (programs run one at a time, so a spin lock is "
        "always free when taken); the order of concurrent atomics on a GPU is not modelled")

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "XCHG": lambda old, val: val,
    "ADD": lambda old, val: old + val,
    "MAX": jnp.maximum,
    "MIN": jnp.minimum,
    "AND": jnp.bitwise_and,
    "OR": jnp.bitwise_or,
    "XOR": jnp.bitwise_xor,
}


def _is_atomic(eqn: Any) -> bool:
    return eqn.primitive.name in ATOMICS


def has_atomics(eqn: Any) -> bool:
    """Does this `pallas_call` equation's body use a Triton atomic, at any depth?"""
    jaxpr = eqn.params.get("jaxpr")
    return jaxpr is not None and rewrite.contains(jaxpr, _is_atomic)


def run_notes(eqns: Iterable[Any]) -> tuple[str, ...]:
    """The note a run of these kernel equations carries: `NOTE` when one uses atomics."""
    return (NOTE,) if any(has_atomics(eqn) for eqn in eqns) else ()


def program_order_overrides(eqn: Any) -> dict[str, Any] | None:
    """Param overrides for a `pallas_call` whose body applies its atomics as loads and
    stores in program order (None: no atomics, nothing to rewrite)."""
    return rewrite.kernel_body_replacing(eqn, _is_atomic, _apply)


def _apply(eqn: Any, invals: list[Any]) -> list[Any]:
    if eqn.primitive.name == "atomic_cas":
        ref, cmp, val = invals
        old = ref[...]
        ref[...] = jnp.where(old == cmp, val, old)
        return [old]
    ref, transforms, val, mask = eqn.params["args_tree"].unflatten(invals)
    name = eqn.params["atomic_type"].name
    if name in _SCATTERS and _gathers(transforms):  # lanes may share an element
        return [_scattered(name, ref, transforms, val, mask)]
    op = _OPS[name]
    old = _bind(pallas_primitives.load_p, (ref, transforms, None, None),
                cache_modifier=None, eviction_policy=None, is_volatile=False)
    new = jnp.broadcast_to(op(old, val), old.shape).astype(old.dtype)
    _bind(pallas_primitives.swap_p, (ref, transforms, new, mask), eviction_policy=None)
    return [old]


# Atomics whose lanes combine where they share an element, as a scatter combines them.
_SCATTERS = {"ADD": "add", "MAX": "max", "MIN": "min"}


def _gathers(transforms: Any) -> bool:
    """Does the ref's indexer take elements by integer arrays (lanes that may repeat)?"""
    return any(isinstance(t, indexing.NDIndexer)
               and any(not isinstance(i, (indexing.Slice, int)) and getattr(i, "shape", ())
                       for i in t.indices)
               for t in transforms or ())


def _scattered(name: str, ref: Any, transforms: Any, val: Any, mask: Any) -> Any:
    """The whole ref updated as a scatter of the (masked) lanes: every lane applies, repeated
    elements included. Returns each lane's value from before the atomic."""
    full = ref[...]
    old = discharge.transform_array(full, transforms)
    val = jnp.broadcast_to(val, old.shape).astype(old.dtype)
    if mask is not None:  # a masked-out lane leaves its element as it is
        val = jnp.where(mask, val, _identity(name, old.dtype))
    where = discharge.transform_array(
        jnp.arange(full.size, dtype=jnp.int32).reshape(full.shape), transforms)
    flat = getattr(full.reshape(-1).at[where.reshape(-1)], _SCATTERS[name])(val.reshape(-1))
    ref[...] = flat.reshape(full.shape)
    return old


def _identity(name: str, dtype: Any) -> Any:
    if name == "ADD":
        return jnp.zeros((), dtype)
    info = jnp.finfo(dtype) if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype)
    return jnp.asarray(info.min if name == "MAX" else info.max, dtype)


def _bind(primitive: Any, args: tuple[Any, ...], **params: Any) -> Any:
    flat, tree = tree_util.tree_flatten(args)
    return primitive.bind(*flat, args_tree=tree, **params)

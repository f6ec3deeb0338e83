"""Loads and stores through a ref view JAX's interpreters cannot address, rewritten as an access
they can address and the same view taken of the value, before pallaslab's interpreted runs.

Three gaps, all inside JAX's own code and all hit by JAX's shipped ragged paged attention:

- TPU interpret mode turns a ref's transforms into one buffer range and follows indexers only:
  a load or store through `ref.reshape(...)` or `ref.bitcast(...)` stops it at
  "'ReshapeTransform' object has no attribute 'indices'". Here the access reads (and for a
  store, writes back) the region the indexers *before* the first other transform select, and
  the rest of the view (reshape, bitcast, further indexers, strides) is taken of that value
  with JAX's own state semantics (`transform_array` / `transform_swap_array`). The values are
  the hardware's; what changes is the extent the interpreter sees accessed: the whole region
  before the view, so its race detector judges that region (said in the run's notes).
- TPU interpret mode's bounds check of a masked store (`pltpu.store(ref, val, mask=...)`)
  compares every dimension of the mask with the first one, so a store to a block with fewer
  columns than rows fails ("Out-of-bounds masked swap") though it lies inside the buffer.
  Here a masked store reads the block, sets the lanes the mask holds, and writes it back: the
  values a masked store leaves, through the interpreter's plain (unmasked) bounds check.
- JAX's HLO interpreter discharges `pl.load` / `pl.store` (`pltpu.store(ref, val, mask=...)`)
  only for indexers of slices and traced scalars: an index that is a Python int in the kernel
  ("'TypedInt' object has no attribute 'shape'") or a strided slice ("Unimplemented stride
  support") stops it. Here such an access becomes the state `get` / `swap` of the same view
  (whose discharge handles both), with the mask applied to the value: masked-off lanes keep
  what the ref held, a masked load gives `other` there.

Only the executor's copy of a kernel body changes: no rule of JAX's is registered or replaced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import jax.numpy as jnp
from jax._src import core as jax_core
from jax._src import tree_util
from jax._src.pallas import primitives as pallas_primitives
from jax._src.state import discharge, indexing
from jax._src.state import primitives as state_primitives

from pallaslab.model._jax import rewrite

TPU_NOTE = ("loads and stores through a reshaped or bitcast ref read and write the region "
            "the indexers before that view select (TPU interpret mode addresses no other "
            "view), the view taken of the value, and a masked store reads its block and "
            "writes it back with the masked lanes set: races are judged on those regions")
HLO_NOTE = ("pl.load / pl.store with a constant index or a strided slice run as the same "
            "ref read and write, the mask applied to the value (JAX's HLO interpreter "
            "discharges neither)")


def _transforms(eqn: Any, invals: Sequence[Any]) -> tuple[Any, ...]:
    if "args_tree" in eqn.params:
        return tuple(eqn.params["args_tree"].unflatten(invals)[1] or ())
    skip = 1 if eqn.primitive is state_primitives.get_p else 2
    return tuple(eqn.params["tree"].unflatten(invals[skip:]))


def _split(transforms: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(the leading indexers, the rest from the first other transform)."""
    for i, t in enumerate(transforms):
        if not isinstance(t, indexing.NDIndexer):
            return list(transforms[:i]), list(transforms[i:])
    return list(transforms), []


def _bind(primitive: Any, ref: Any, transforms: Sequence[Any], *value: Any) -> Any:
    flat, tree = tree_util.tree_flatten(tuple(transforms))
    return primitive.bind(ref, *value, *flat, tree=tree)


def _read(ref: Any, transforms: Sequence[Any]) -> Any:
    """The ref's value through `transforms`, the interpreter reading only through indexers."""
    region, view = _split(transforms)
    whole = _bind(state_primitives.get_p, ref, region)
    return discharge.transform_array(whole, view) if view else whole


def _swap(ref: Any, transforms: Sequence[Any], value: Any) -> Any:
    """`value` written through `transforms`; the old value back (a read and a write of the
    region before any view)."""
    region, view = _split(transforms)
    if not view:
        return _bind(state_primitives.swap_p, ref, region, value)
    whole = _bind(state_primitives.get_p, ref, region)
    old, new = discharge.transform_swap_array(whole, view, value)
    _bind(state_primitives.swap_p, ref, region, new)
    return old


def _as_state_access(eqn: Any, invals: list[Any]) -> list[Any]:
    """A load or store (state or `pl.load` / `pl.store`) as state reads and writes through
    indexers only, any mask applied to the value."""
    if eqn.primitive is state_primitives.get_p:
        return [_read(invals[0], _transforms(eqn, invals))]
    if eqn.primitive is state_primitives.swap_p:
        return [_swap(invals[0], _transforms(eqn, invals), invals[1])]
    parts = eqn.params["args_tree"].unflatten(invals)
    if eqn.primitive is pallas_primitives.load_p:
        ref, transforms, mask, other = parts
        value = _read(ref, transforms or ())
        if mask is None:
            return [value]
        fill = jnp.zeros((), value.dtype) if other is None else other
        return [jnp.where(mask, value, fill).astype(value.dtype)]
    ref, transforms, val, mask = parts
    new = val
    if mask is not None:  # masked-off lanes keep what the ref holds
        old = _read(ref, transforms or ())
        new = jnp.where(mask, jnp.broadcast_to(val, old.shape).astype(old.dtype), old)
    return [_swap(ref, transforms or (), new)]


_STATE = (state_primitives.get_p, state_primitives.swap_p)
_PALLAS = (pallas_primitives.load_p, pallas_primitives.swap_p)


# ---- TPU interpret mode: views other than indexers, masked stores ------------------------

def _tpu_refuses(eqn: Any) -> bool:
    if eqn.primitive not in (*_STATE, *_PALLAS):
        return False
    transforms = _transforms(eqn, eqn.invars)
    if not all(isinstance(t, indexing.NDIndexer) for t in transforms):
        return True
    return eqn.primitive is pallas_primitives.swap_p and \
        eqn.params["args_tree"].unflatten(eqn.invars)[3] is not None


def has_views(eqn: Any) -> bool:
    """Does this kernel equation's body load or store through a reshaped or bitcast ref, or
    store with a mask?"""
    jaxpr = eqn.params.get("jaxpr")
    return jaxpr is not None and rewrite.contains(jaxpr, _tpu_refuses)


def region_overrides(eqn: Any) -> dict[str, Any] | None:
    """Param overrides for a `pallas_call` whose viewed or masked accesses run as reads and
    writes of their region (None: it has none)."""
    return rewrite.kernel_body_replacing(eqn, _tpu_refuses, _as_state_access)


# ---- HLO interpreter: pl.load / pl.store indexers its discharge refuses ------------------

def _is_refused_masked_access(eqn: Any) -> bool:
    if eqn.primitive not in _PALLAS:
        return False
    return any(isinstance(t, indexing.NDIndexer) and any(_refused(i) for i in t.indices)
               for t in _transforms(eqn, eqn.invars))


def _refused(index: Any) -> bool:
    if isinstance(index, indexing.Slice):
        return isinstance(index.stride, int) and index.stride > 1
    # A constant: a literal in the jaxpr, a Python int while the body is re-traced.
    return isinstance(index, (int, jax_core.Literal))


def has_refused_indexers(eqn: Any) -> bool:
    jaxpr = eqn.params.get("jaxpr")
    return jaxpr is not None and rewrite.contains(jaxpr, _is_refused_masked_access)


def state_access_overrides(eqn: Any) -> dict[str, Any] | None:
    """Param overrides for a `pallas_call` whose refused `pl.load` / `pl.store` run as state
    reads and writes (None: it has none)."""
    return rewrite.kernel_body_replacing(eqn, _is_refused_masked_access, _as_state_access)


def tpu_notes(eqns: Iterable[Any]) -> tuple[str, ...]:
    return (TPU_NOTE,) if any(has_views(eqn) for eqn in eqns) else ()


def hlo_notes(eqns: Iterable[Any]) -> tuple[str, ...]:
    return (HLO_NOTE,) if any(has_refused_indexers(eqn) for eqn in eqns) else ()

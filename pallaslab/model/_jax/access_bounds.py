"""Which elements of its array one load or store touches, unclamped, and which lie outside.

JAX's interpreters clamp (or pad) an out-of-range `pl.ds` and drop out-of-range gathers and
scatters, so a kernel that reads or writes past its array runs "correctly" there; on a GPU the
same lanes are illegal addresses. Here every lane's coordinates in the base array are computed
from the access's indexers themselves (`x_ref.at[a].at[b][c]` composes three), so nothing is
clamped; lanes a mask turns off do not count.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.state import indexing

# primitive name -> (what the access does, which unflattened argument holds its mask)
ACCESSES = {"masked_load": ("load", 2), "get": ("load", None), "masked_swap": ("store", 3),
            "swap": ("store", None), "addupdate": ("store", None),
            "atomic_rmw": ("atomic update", 3)}


def access_parts(eqn: Any, invals: Sequence[Any]) -> tuple[Any, Sequence[Any], Any]:
    """(ref, transforms, mask or None) of a load / store / atomic equation's inputs."""
    name = eqn.primitive.name
    if "args_tree" in eqn.params:  # pallas's masked_load / masked_swap / atomic_rmw
        parts = eqn.params["args_tree"].unflatten(invals)
        return parts[0], tuple(parts[1]), parts[ACCESSES[name][1]]
    skip = 1 if name == "get" else 2  # state get: (ref, *idx); swap/addupdate: (ref, val, *idx)
    return invals[0], tuple(eqn.params["tree"].unflatten(invals[skip:])), None


@dataclasses.dataclass(frozen=True)
class Lanes:
    """One execution of an access, per lane (the access's result shape)."""

    coords: list[Any]  # the lane's coordinates in the array, one array per dimension
    active: Any  # bool: not masked off
    outside: Any  # bool: active, and outside the array

    def mark(self, shadow: Any, value: int) -> None:
        """Raise the elements of `shadow` (a ref shaped like the array) that active lanes
        inside the array touch to at least `value`; lanes outside touch nothing (no clamp)."""
        written = self.active & ~self.outside
        shape = shadow.shape
        at = tuple(jnp.where(written, c, size) for c, size in zip(self.coords, shape,
                                                                   strict=True))
        marks = jnp.where(written, jnp.asarray(value, shadow.dtype), 0).astype(shadow.dtype)
        shadow[...] = shadow[...].at[at].max(marks, mode="drop")


def lanes(shape: tuple[int, ...], transforms: Sequence[Any], mask: Any) -> Lanes | None:
    """The lanes of an access to an array of `shape` through `transforms` (with `mask`);
    None for transforms other than indexers (bitcasts, reshapes: not followed)."""
    if not all(isinstance(t, indexing.NDIndexer) for t in transforms):
        return None
    result = tuple(transforms[-1].get_indexer_shape()) if transforms else shape
    if not all(isinstance(d, int) for d in result):  # dynamically sized slices
        return None
    if not math.prod(result):  # no lanes at all
        return None
    coords: list[Any] = [lax.broadcasted_iota(jnp.int32, result, d) for d in range(len(result))]
    for indexer in reversed(transforms):  # none: the whole array, lanes are its elements
        coords = _parent_coords(indexer, coords)
    coords = [jnp.broadcast_to(jnp.asarray(c, jnp.int32), result) for c in coords]
    inside = jnp.ones(result, bool)
    for c, size in zip(coords, shape, strict=True):
        inside = inside & (c >= 0) & (c < size)
    active = jnp.ones(result, bool) if mask is None else jnp.broadcast_to(mask, result)
    return Lanes(coords, active, active & ~inside)


def _parent_coords(indexer: Any, coords: list[Any]) -> list[Any]:
    """Coordinates in the indexed array of the lanes at `coords` of the indexer's result
    (numpy's rule for where integer-array indices put their dimensions)."""
    is_int = [not isinstance(i, indexing.Slice) for i in indexer.indices]
    k = len(indexer.int_indexer_shape)
    ints_at = np.flatnonzero(is_int)
    contiguous = bool(np.all(np.diff(ints_at) == 1))
    first_int = 0 if not contiguous or not len(ints_at) else int(ints_at[0])
    int_dims = list(range(first_int, first_int + k))
    slice_dims = iter(d for d in range(len(coords)) if d not in int_dims)
    parent: list[Any] = []
    for idx in indexer.indices:
        if isinstance(idx, indexing.Slice):
            at = coords[next(slice_dims)]
            parent.append(jnp.asarray(idx.start, jnp.int32) + idx.stride * at)
            continue
        arr = jnp.asarray(idx, jnp.int32)
        if arr.ndim == 0:
            parent.append(arr)
        else:  # gathered: the index array at the lane's integer-indexed coordinates
            full = jnp.broadcast_to(arr, indexer.int_indexer_shape)
            parent.append(full[tuple(coords[d] for d in int_dims)])
    return parent


def accumulate(acc: Any, lanes: Lanes) -> None:
    """Add one execution of an access to its accumulator ref `[count, *first, *last]`: how
    many lanes fell outside, the first of them (over all executions) and the last."""
    coords = lanes.coords
    rank = len(coords)
    flat = lanes.outside.reshape(-1)
    n = jnp.sum(flat, dtype=jnp.int32)
    first_lane = jnp.argmax(flat)
    last_lane = flat.size - 1 - jnp.argmax(flat[::-1])
    first = jnp.stack([c.reshape(-1)[first_lane] for c in coords]) if rank else \
        jnp.zeros((0,), jnp.int32)
    last = jnp.stack([c.reshape(-1)[last_lane] for c in coords]) if rank else first
    old = acc[...]
    seen = old[0] > 0
    acc[...] = jnp.concatenate([
        (old[0] + n)[None],
        jnp.where(seen | (n == 0), old[1:1 + rank], first),
        jnp.where(n > 0, last, old[1 + rank:])])

"""Copies of a traced size in interpret mode: a `dma_start` whose source and destination are
`pl.ds(start, size)` windows with a traced `size` (what `pltpu.emit_pipeline` makes of a
`pl.BoundedSlice` block), rewritten as `size` row copies before pallaslab's own interpreted
run.

JAX's HLO interpreter discharges a DMA by slicing arrays, which needs every slice's size
concrete: it stops at such a copy ("Shapes must be 1D sequences of concrete values of integer
type"). On a TPU the DMA copies `size` rows of the window (the pipeline has already rounded
the size to the tiling). The rewrite does exactly that, one row at a time, in a loop of
`size` trips: row `i` of the source window to row `i` of the destination window (rows past
either array's end are not copied: interpret mode would clamp them onto the last row). Interpret
mode completes a DMA when it starts, so the copy happens there; the matching `dma_wait` (of
the same traced size) has nothing left to do and goes. Not modelled: the semaphore's count
for these copies (interpret mode never blocks on a wait, so nothing reads it), and copies
with more than one traced size per window. Only the executor's copy of the kernel's jaxpr
changes: the user's own `interpret=True` run is untouched.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax
from jax._src import core as jax_core
from jax._src.state import indexing
from jax._src.state import types as state_types

from pallaslab.model._jax import rewrite

NOTE = ("DMAs of a traced size (a pl.BoundedSlice window in emit_pipeline) copy their "
        "window's rows one by one when they start, as interpret mode completes every DMA; "
        "rows past an array's end are not copied; the semaphore counts of those copies are "
        "not modelled")

_COPIES = ("dma_start", "dma_wait")


def _traced_slice(transforms: Any) -> tuple[int, int] | None:
    """(the transform's position, the index's position) of the one window whose size is
    traced, or None."""
    found = [(t, i) for t, tr in enumerate(transforms) if isinstance(tr, indexing.NDIndexer)
             for i, idx in enumerate(tr.indices)
             if isinstance(idx, indexing.Slice) and not isinstance(idx.size, int)
             and not isinstance(idx.size, jax_core.Literal)]
    return found[0] if found else None


def _refs(eqn: Any, values: Any) -> tuple[Any, Any]:
    src, dst, *_ = eqn.params["tree"].unflatten(values)
    return src, dst


def _transforms(ref: Any) -> tuple[Any, ...]:
    return ref.transforms if isinstance(ref, state_types.TransformedRef) else ()


def is_traced_size_copy(eqn: Any) -> bool:
    """A `dma_start` / `dma_wait` whose source or destination window has a traced size."""
    if eqn.primitive.name not in _COPIES:
        return False
    src, dst = _refs(eqn, eqn.invars)
    return _traced_slice(_transforms(src)) is not None or \
        _traced_slice(_transforms(dst)) is not None


def has_traced_size_copies(eqn: Any) -> bool:
    jaxpr = eqn.params.get("jaxpr") if eqn.primitive.name == "pallas_call" else None
    return jaxpr is not None and rewrite.contains(jaxpr, is_traced_size_copy)


def run_notes(eqns: Any) -> tuple[str, ...]:
    return (NOTE,) if any(has_traced_size_copies(e) for e in eqns) else ()


def row_copy_overrides(eqn: Any) -> dict[str, Any] | None:
    """Param overrides for a `pallas_call` whose traced-size copies run as row copies (None:
    it has none)."""
    return rewrite.kernel_body_replacing(eqn, is_traced_size_copy, _copy_rows)


def _row(ref: Any, where: tuple[int, int], i: Any) -> Any:
    """`ref`'s row `i` of its traced-size window (that dimension indexed, so dropped)."""
    t, k = where
    if t != 0 or len(ref.transforms) != 1:
        raise NotImplementedError("a traced-size DMA window under another transform")
    indices = list(ref.transforms[0].indices)
    indices[k] = indices[k].start + i
    return ref.ref.at[tuple(indices)]


def _copy_rows(eqn: Any, invals: list[Any]) -> list[Any]:
    if eqn.primitive.name == "dma_wait":
        return []  # the copy was made when it started
    src, dst = _refs(eqn, invals)
    src_at = _traced_slice(_transforms(src))
    dst_at = _traced_slice(_transforms(dst))
    if src_at is None or dst_at is None:
        raise NotImplementedError("a DMA with a traced size on one side only")
    size = src.transforms[src_at[0]].indices[src_at[1]].size
    # rows past either array's end are not copied (interpret mode would clamp them onto the
    # last row); TPU interpret mode reports such a read or write as out of bounds
    for ref, (t, k) in ((src, src_at), (dst, dst_at)):
        size = jnp.minimum(size, ref.ref.shape[k] - ref.transforms[t].indices[k].start)

    def body(i: Any, carry: Any) -> Any:
        row_dst = _row(dst, dst_at, i)
        row_dst[...] = _row(src, src_at, i)[...]
        return carry

    lax.fori_loop(0, size, body, 0)
    return []

"""A kernel body as pallaslab runs it under JAX's HLO interpreter (`interpret`, the kernels
`vectorized` interprets, block stepping): its copy rewritten where JAX's discharge rules stop or
differ from the hardware. No rule of JAX's is registered or replaced."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pallaslab.model._jax import atomics, ref_views, remote_copies, traced_size_copies

# In order, each on the body the one before it left (each gives the params it changes, or
# None): Triton atomics as loads and stores applied in program order; DMAs of a traced size
# (emit_pipeline's pl.BoundedSlice) as row copies; remote copies checked to have one sender per
# device; pl.load / pl.store indexers JAX's discharge refuses as state accesses.
BODY_REWRITES = (atomics.program_order_overrides, traced_size_copies.row_copy_overrides,
                 remote_copies.one_target_overrides, ref_views.state_access_overrides)


def rewritten_body(eqn: Any) -> dict[str, Any]:
    """The params `BODY_REWRITES` change in a kernel equation (empty: none applies)."""
    update: dict[str, Any] = {}
    for body_rewrite in BODY_REWRITES:
        if params := body_rewrite(eqn):
            update |= params
            eqn = eqn.replace(params={**eqn.params, **params})
    return update


def run_notes(eqns: Iterable[Any]) -> tuple[str, ...]:
    """What a run of these kernel equations says the rewrites model."""
    eqns = list(eqns)
    return (*atomics.run_notes(eqns), *traced_size_copies.run_notes(eqns),
            *remote_copies.run_notes(eqns), *ref_views.hlo_notes(eqns))

"""Remote DMAs under JAX's HLO interpreter, where TPU interpret mode cannot run the kernels (a
DMA semaphore passed between `pallas_call`s: JAX's `ppermute_start` / `ppermute_done`).

JAX's HLO interpreter discharges a remote `dma_start` inside `shard_map` as a collective: every
device gathers every device's source and target, and takes the source of the device whose
target it is. That is the copy's semantics only when every device starts the copy together
(SPMD, not under `pl.when` or a loop) and each device is the target of exactly one: a device
no other targets takes device 0's source, and of two senders one is dropped. So the executor
runs such kernels only when they start their remote copies unconditionally
(`lockstep_remote_copies`), and its copy of the body checks, at each remote start, that every
device is the target of exactly one: otherwise the run stops with a NotImplementedError, a limit
of the executor (the comparison is incomplete), never a verdict on the kernel.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
from jax._src import core as jax_core

from pallaslab.model._jax import rewrite
from pallaslab.model._jax.equation_fields import call_site_of
from pallaslab.model._jax.trace import bind_eqn

NOTE = ("remote DMAs run as JAX's HLO interpreter runs them, as a collective every device "
        "starts together (a copy passed between calls lands at its wait); each device must be "
        "the target of exactly one (checked as the copy starts)")

# Equations that run their body once, unconditionally: a remote start inside stays in step.
_UNCONDITIONAL = ("run_scoped", "pjit", "jit", "closed_call", "named_call")


def _is_remote_start(eqn: Any) -> bool:
    return eqn.primitive.name == "dma_start" and \
        eqn.params["tree"].unflatten(eqn.invars)[-1] is not None


def _signals_a_device(eqn: Any) -> bool:
    if eqn.primitive.name != "semaphore_signal":
        return False
    parts = eqn.params["args_tree"].unflatten(eqn.invars)
    return any(p is not None for p in parts[3:])  # device_id, core_index


def lockstep_remote_copies(eqn: Any) -> bool:
    """Does this `pallas_call` talk to other devices only by remote DMAs that every program
    starts unconditionally (none under `pl.when` or a loop, no semaphore signalled to a
    device)?"""
    body = eqn.params.get("jaxpr")
    if body is None or rewrite.contains(body, _signals_a_device):
        return False
    return _starts_in_step(body)


def _starts_in_step(jaxpr: Any) -> bool:
    for e in jaxpr.eqns:
        subs = [s for v in e.params.values() for s in rewrite.subjaxprs(v)]
        if not any(rewrite.contains(s, _is_remote_start) for s in subs):
            continue
        if e.primitive.name not in _UNCONDITIONAL or not all(_starts_in_step(s) for s in subs):
            return False
    return True


def has_remote_copies(eqn: Any) -> bool:
    body = eqn.params.get("jaxpr")
    return body is not None and rewrite.contains(body, _is_remote_start)


def one_target_overrides(eqn: Any) -> dict[str, Any] | None:
    """Param overrides for a `pallas_call` whose remote starts check that every device is the
    target of exactly one (None: it starts none)."""
    return rewrite.kernel_body_replacing(eqn, _is_remote_start, _checked_start)


def _checked_start(eqn: Any, invals: list[Any]) -> list[Any]:
    axes = [n for n in jax_core.get_axis_env().axis_sizes if n is not None]
    parts = eqn.params["tree"].unflatten(invals)
    coords = jax.tree_util.tree_leaves(parts[-1])
    if len(axes) != 1 or len(coords) != 1:  # JAX's rule says what it does not implement
        return bind_eqn(eqn, invals, eqn.params)
    # One coordinate on a one-axis mesh is the device's index (JAX 0.11's rule would compare
    # the id's tuple itself).
    (target,) = coords
    me = jax.lax.axis_index(axes[0])
    senders = jnp.sum(jax.lax.all_gather(target, axes[0]) == me)
    where = _where(eqn)
    jax.debug.callback(lambda n, d: _one_sender(int(n), int(d), where), senders, me)
    flat, tree = jax.tree_util.tree_flatten((*parts[:-1], target))
    return bind_eqn(eqn, flat, {**eqn.params, "tree": tree})


def _where(eqn: Any) -> str:
    from pallaslab.model.source_names import short_source

    site = call_site_of(eqn)
    return short_source(site) if site else "an unknown line"


def _one_sender(senders: int, device: int, where: str) -> None:
    if senders != 1:
        raise NotImplementedError(
            f"the remote copy at {where} targets device {device} from {senders} devices: the "
            "HLO interpreter's executor runs a remote copy only when each device is the "
            "target of exactly one")


def run_notes(eqns: Iterable[Any]) -> tuple[str, ...]:
    return (NOTE,) if any(has_remote_copies(e) for e in eqns) else ()

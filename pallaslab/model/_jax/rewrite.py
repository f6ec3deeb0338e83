"""A jaxpr evaluated with some of its equations replaced, at any depth (`pl.when`, loops,
`run_scoped`): sub-jaxprs that hold a matching equation are re-traced the same way.

The debug-check instrumentation (`checks`) and the per-core stepper of mesh kernels
(`stepper`) both rebuild kernel bodies this way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from jax._src import core as jax_core
from jax._src import linear_util as lu
from jax._src import source_info_util
from jax._src.interpreters import partial_eval as pe

from pallaslab.model._jax.trace import bind_eqn

Matches = Callable[[Any], bool]  # does this equation get replaced?
Replace = Callable[[Any, list[Any]], list[Any]]  # (equation, its inputs) -> its outputs


def contains(jaxpr: Any, matches: Matches) -> bool:
    """Does `jaxpr` hold a matching equation, at any depth?"""
    return any(matches(eqn) or any(contains(sub, matches) for value in eqn.params.values()
                                   for sub in subjaxprs(value))
               for eqn in jaxpr.eqns)


# Host output a re-run of the body must not repeat: the user's prints appear once, from the run.
HOST_OUTPUT = ("debug_print", "debug_callback")


def silenced_outputs(eqn: Any) -> list[Any]:
    """What a host-output equation gives when a re-run skips it: zeros for any results."""
    import jax.numpy as jnp

    return [jnp.zeros(v.aval.shape, v.aval.dtype) for v in eqn.outvars]


def eval_replacing(jaxpr: Any, consts: Any, args: Any, matches: Matches,
                   replace: Replace) -> list[Any]:
    """Evaluate `jaxpr` (inside a trace) with each matching equation replaced."""
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jax_core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        # The user's line stays on every equation (the stepper shows it).
        with source_info_util.user_context(eqn.source_info.traceback,
                                           name_stack=eqn.source_info.name_stack):
            if matches(eqn):
                outs = replace(eqn, invals)
            else:
                with body_axes(eqn):
                    params = {k: _param(v, matches, replace) for k, v in eqn.params.items()}
                outs = bind_eqn(eqn, invals, params)
        for v, x in zip(eqn.outvars, outs, strict=True):
            if not isinstance(v, jax_core.DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


def body_axes(eqn: Any) -> Any:
    """The axis names a `shard_map`'s body is traced under (its `lax.axis_index`, a remote
    DMA's discharge), so a re-traced body finds them; nothing for other equations."""
    axes = eqn.params.get("newly_manual_axes") if eqn.primitive.name == "shard_map" else None
    if not axes:
        return contextlib.nullcontext()
    mesh = eqn.params["mesh"]
    return jax_core.extend_axis_env_nd([(k, v) for k, v in mesh.shape.items() if k in axes])


def retrace_replacing(jaxpr: Any, matches: Matches, replace: Replace) -> Any:
    """`jaxpr` re-traced with each matching equation replaced (in the current trace
    environment, e.g. a grid's)."""
    def fn(*args: Any) -> list[Any]:
        return eval_replacing(jaxpr, jaxpr.consts, args, matches, replace)

    new, _, consts = pe.trace_to_jaxpr_dynamic(
        lu.wrap_init(fn, debug_info=jaxpr.debug_info), [v.aval for v in jaxpr.invars])
    return new.with_consts(consts) if consts else new


def kernel_body_replacing(eqn: Any, matches: Matches, replace: Replace
                          ) -> dict[str, Any] | None:
    """Param overrides for a `pallas_call` whose body is re-traced (in its grid's
    environment) with each matching equation replaced; None when it has none."""
    body = eqn.params.get("jaxpr")
    if "grid_mapping" not in eqn.params or body is None or not contains(body, matches):
        return None
    from jax._src.pallas import core as pallas_core

    gm = eqn.params["grid_mapping"]
    with pallas_core.tracing_grid_env(gm.grid, gm.vmapped_dims):
        return {"jaxpr": retrace_replacing(body, matches, replace)}


def _param(value: Any, matches: Matches, replace: Replace) -> Any:
    # jax 0.12 has one Jaxpr class for open and closed jaxprs (constants carried in it).
    if isinstance(value, jax_core.Jaxpr) and contains(value, matches):
        return retrace_replacing(value, matches, replace)
    if isinstance(value, tuple) and any(isinstance(v, jax_core.Jaxpr) for v in value):
        return tuple(_param(v, matches, replace) for v in value)
    return value


def subjaxprs(value: Any) -> list[Any]:
    if isinstance(value, jax_core.Jaxpr):
        return [value]
    if isinstance(value, tuple):
        return [j for v in value for j in subjaxprs(v)]
    return []

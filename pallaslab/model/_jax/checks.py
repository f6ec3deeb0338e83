"""`pl.debug_check` under the interpreters.

JAX's interpreters drop `debug_check` (a `check` equation with debug=True) unless the
computation is checkified, and checkify has no rule for `pallas_call`. So the executors
rebuild each kernel body with every `check` equation (at any depth: `pl.when`, loops,
`run_scoped`) replaced by a host callback that reports a failed check, and optionally a
callback at the start of every program (to know which program printed or failed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax._src import core as jax_core
from jax._src import linear_util as lu
from jax._src import tree_util
from jax._src.interpreters import partial_eval as pe
from jax._src.pallas import core as pallas_core

from pallaslab.model._jax.base import PALLAS_CALL
from pallaslab.model._jax.trace import _bind

CHECK = "check"


def debug_checks_enabled() -> Any:
    """A context in which traced kernels keep their `pl.debug_check`s."""
    return pallas_core.enable_debug_checks(True)


def instrument_kernel(eqn: Any, *, on_entry: Callable[[], None] | None = None,
                      on_check: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """Param overrides for a `pallas_call` whose body calls `on_entry()` when each program
    starts and `on_check(message)` when a debug check fails. None when there is nothing to
    instrument (or a mesh kernel)."""
    if eqn.primitive is not PALLAS_CALL or (on_entry is None and (
            on_check is None or not _has_check(eqn.params["jaxpr"]))):
        return None
    jaxpr = eqn.params["jaxpr"]
    gm = eqn.params["grid_mapping"]

    def body(*refs: Any) -> Any:
        if on_entry is not None:
            jax.debug.callback(on_entry)
        if on_check is None:
            return jax_core.eval_jaxpr(jaxpr, (), *refs)
        return _eval_reporting_checks(jaxpr, (), refs, on_check)

    with pallas_core.tracing_grid_env(gm.grid, gm.vmapped_dims):
        new, _, consts = pe.trace_to_jaxpr_dynamic(
            lu.wrap_init(body, debug_info=jaxpr.debug_info), [v.aval for v in jaxpr.invars])
    if consts:  # pragma: no cover - the callbacks close over nothing traced
        return None
    return {"jaxpr": new}


def _has_check(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == CHECK:
            return True
        for value in eqn.params.values():
            if any(_has_check(sub) for sub in _subjaxprs(value)):
                return True
    return False


def _subjaxprs(value: Any) -> list[Any]:
    if isinstance(value, jax_core.Jaxpr):
        return [value]
    if isinstance(value, tuple):
        return [j for v in value for j in _subjaxprs(v)]
    return []


def _eval_reporting_checks(jaxpr: Any, consts: Any, args: Any,
                           on_check: Callable[[str], None]) -> list[Any]:
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jax_core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive.name == CHECK:
            jax.debug.callback(functools.partial(_report, eqn.params["err_tree"], on_check),
                               *invals)
            continue
        params = {k: _rewrite_param(v, on_check) for k, v in eqn.params.items()}
        outs = _bind(eqn, invals, params)
        for v, x in zip(eqn.outvars, outs, strict=True):
            if not isinstance(v, jax_core.DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _rewrite_param(value: Any, on_check: Callable[[str], None]) -> Any:
    # jax 0.12 has one Jaxpr class for open and closed jaxprs (constants carried in it).
    if isinstance(value, jax_core.Jaxpr) and _has_check(value):
        def fn(*args: Any) -> list[Any]:
            return _eval_reporting_checks(value, value.consts, args, on_check)

        new, _, consts = pe.trace_to_jaxpr_dynamic(
            lu.wrap_init(fn, debug_info=value.debug_info), [v.aval for v in value.invars])
        return new.with_consts(consts) if consts else new
    if isinstance(value, tuple) and any(isinstance(v, jax_core.Jaxpr) for v in value):
        return tuple(_rewrite_param(v, on_check) for v in value)
    return value


def _report(err_tree: Any, on_check: Callable[[str], None], *values: Any) -> None:
    error = tree_util.tree_unflatten(err_tree, values)
    message = error.get()
    if message:
        on_check(str(message))

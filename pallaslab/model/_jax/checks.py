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

from pallaslab.model._jax import rewrite
from pallaslab.model._jax.base import PALLAS_CALL

CHECK = "check"


def debug_checks_enabled() -> Any:
    """A context in which traced kernels keep their `pl.debug_check`s."""
    return pallas_core.enable_debug_checks(True)


def instrument_kernel(eqn: Any, *, on_entry: Callable[[], None] | None = None,
                      on_check: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """Param overrides for a `pallas_call` whose body calls `on_entry()` when each program
    starts and `on_check(message)` when a debug check fails. None when there is nothing to
    instrument (or a mesh kernel, or one closing over refs: its discharge needs them as the
    body's constvars)."""
    if eqn.primitive is not PALLAS_CALL or eqn.params["jaxpr"].constvars or (
            on_entry is None and (on_check is None or not _has_check(eqn.params["jaxpr"]))):
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
    return rewrite.contains(jaxpr, _is_check)


def _is_check(eqn: Any) -> bool:
    return eqn.primitive.name == CHECK


def _eval_reporting_checks(jaxpr: Any, consts: Any, args: Any,
                           on_check: Callable[[str], None]) -> list[Any]:
    def report(eqn: Any, invals: list[Any]) -> list[Any]:
        jax.debug.callback(functools.partial(_report, eqn.params["err_tree"], on_check),
                           *invals)
        return []

    return rewrite.eval_replacing(jaxpr, consts, args, _is_check, report)


def _report(err_tree: Any, on_check: Callable[[str], None], *values: Any) -> None:
    error = tree_util.tree_unflatten(err_tree, values)
    message = error.get()
    if message:
        on_check(str(message))

"""Re-binding captured kernels with other params, and rewriting whole jaxprs to do so."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax._src import core as jax_core
from jax._src.pallas import core as pallas_core
from jax._src.state import types as state_types

from pallaslab.model._jax import rewrite
from pallaslab.model._jax.base import KERNEL_PRIMITIVES, Jaxpr
from pallaslab.model._jax.equation_fields import call_site_of
from pallaslab.model._jax.versions import JAX_VERSION
from pallaslab.model.kernel import (
    Kernel,
)

# --------------------------------------------------------------------------------------------
# Re-running and re-lowering captured kernels (for executors and lowering)


def kernel_call_avals(kernel: Kernel) -> list[jax.ShapeDtypeStruct]:
    """Abstract values of the operands a kernel equation is bound with.

    For `pallas_call`: dynamic grid bounds, scalar-prefetch arrays, then inputs.
    For mesh kernels: the inputs.
    """
    return [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in kernel.handle.eqn.invars]


def kernel_callable(kernel: Kernel, **param_overrides: Any) -> Callable[..., list[Any]]:
    """A function binding the captured kernel alone, with some equation params replaced.

    Useful overrides: `interpret=True` or a `pltpu.InterpretParams(...)`, `debug=True`,
    `compiler_params=...`. Call it with operands matching `kernel_call_avals(kernel)`;
    it returns the list of outputs.
    """
    eqn = kernel.handle.eqn
    params = override_params(eqn, param_overrides)
    as_refs = _ref_operands(eqn)

    def call(*operands: Any) -> list[Any]:
        if as_refs:
            operands = tuple(jax.new_ref(x) if i in as_refs else x
                             for i, x in enumerate(operands))
        return list(eqn.primitive.bind(*operands, **params))

    return call


def _ref_operands(eqn: Any) -> frozenset[int]:
    """The operands a mesh kernel was bound with as Refs (`pl.core_map` inside `run_state`
    writes its inputs in place). From JAX 0.12.1 a mesh kernel that writes an input refuses
    it as an array, so re-binding it alone passes those as new Refs again."""
    if JAX_VERSION < (0, 12, 1):
        return frozenset()
    return frozenset(i for i, v in enumerate(eqn.invars)
                     if isinstance(v.aval, state_types.AbstractRef))


def override_params(eqn: Any, overrides: Mapping[str, Any]) -> dict[str, Any]:
    params = dict(eqn.params)
    unknown = set(overrides) - set(params)
    if unknown:
        raise TypeError(f"{eqn.primitive.name} has no parameter(s) {sorted(unknown)}")
    params.update(overrides)
    return params


def rewrite_kernels(
    closed_jaxpr: Jaxpr, overrides: Callable[[Any], Mapping[str, Any] | None]
) -> Jaxpr:
    """A copy of the jaxpr where every kernel equation's params are updated by `overrides(eqn)`.

    Descends into every sub-jaxpr (jit, scan, cond, custom_vjp, shard_map, ...), so a whole
    traced function can be re-run with, e.g., every kernel interpreted. The effects the new
    params bring (interpret mode's ordered host callbacks) are added to every enclosing
    equation and jaxpr, so kernels inside `cond`, `scan`, `custom_vjp`, ... still lower.
    """
    return _rewrite(closed_jaxpr, overrides)[0]


def _rewrite(jaxpr: Any, overrides: Callable[[Any], Mapping[str, Any] | None]
             ) -> tuple[Any, set[Any]]:
    added: set[Any] = set()
    new_eqns = []
    changed = False
    for eqn in jaxpr.eqns:
        extra: set[Any] = set()
        if eqn.primitive in KERNEL_PRIMITIVES:
            update = overrides(eqn)
            if update:
                params = override_params(eqn, update)
                extra = set(pallas_core.get_interpret_effects(params.get("interpret")))
                eqn = eqn.replace(params=params, effects=eqn.effects | extra)
                changed = True
        else:
            new_params = {}
            with rewrite.body_axes(eqn):  # a shard_map's kernels re-traced under its axes
                rewritten = [(key, value, *rewrite_value(value, overrides))
                             for key, value in eqn.params.items()]
            for key, value, new_value, effs in rewritten:
                if new_value is not value:
                    new_params[key] = new_value
                    extra |= effs
            if new_params:
                eqn = eqn.replace(params={**eqn.params, **new_params},
                                  effects=eqn.effects | extra)
                changed = True
        added |= extra
        new_eqns.append(eqn)
    if not changed:
        return jaxpr, set()
    return jaxpr.replace(eqns=new_eqns, effects=jaxpr.effects | added), added


def rewrite_value(value: Any, overrides: Callable[[Any], Mapping[str, Any] | None]
                   ) -> tuple[Any, set[Any]]:
    if isinstance(value, Jaxpr):
        return _rewrite(value, overrides)
    if isinstance(value, tuple) and any(isinstance(v, Jaxpr) for v in value):
        pairs = [_rewrite(v, overrides) if isinstance(v, Jaxpr) else (v, set()) for v in value]
        new = tuple(p[0] for p in pairs)
        if all(a is b for a, b in zip(new, value, strict=True)):
            return value, set()
        return new, set().union(*(p[1] for p in pairs))
    return value, set()


def jaxpr_callable(closed_jaxpr: Jaxpr) -> Callable[..., list[Any]]:
    """Evaluate a closed jaxpr on flat arguments (wrap in `jax.jit` to compile it once)."""
    return jax_core.jaxpr_as_fun(closed_jaxpr)


def is_kernel_eqn_of(eqn: Any, kernel: Kernel) -> bool:
    return eqn is kernel.handle.eqn


def primitive_sources(kernel: Kernel, primitive: str) -> tuple[str, ...]:
    """"file.py:LINE" of every equation binding `primitive` in the kernel body (at any depth:
    `pl.when`, loops, `run_scoped`, nested pipelines), in order, without repeats."""
    eqn = kernel.handle.eqn
    bodies = eqn.params.get("jaxprs") or (eqn.params.get("jaxpr"),)
    found: dict[str, None] = {}

    def walk(jaxpr: Any) -> None:
        for inner in jaxpr.eqns:
            if inner.primitive.name == primitive and (site := call_site_of(inner)):
                found.setdefault(site)
            for value in inner.params.values():
                for sub in value if isinstance(value, tuple) else (value,):
                    if isinstance(sub, Jaxpr):
                        walk(sub)

    for body in bodies:
        if body is not None:
            walk(body)
    return tuple(found)

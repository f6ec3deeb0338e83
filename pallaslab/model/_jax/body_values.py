"""One program of a BlockSpec `pallas_call` evaluated eagerly, keeping what the line-finding
cause (`pallaslab.execute.causes.body_lines`) needs: each mask, select and running max's
value, and for every equation the equations its value flows from (a backward slice).

The body's state is discharged once (refs become values in and out), then each program is
evaluated equation by equation on concrete arrays: `pl.when` runs only its taken branch (so
its equations are seen), loops are bound whole (their insides are not told apart), a `while`
loop bounded at `traced_control_flow.MAX_TRIPS` iterations (this process cannot be stopped
inside XLA). A `Flip` re-runs a program with one mask or select taking its other value at
chosen elements: whether that repairs the wrong elements is what names a line as the cause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax._src import core as jax_core
from jax._src.state import discharge as state_discharge

from pallaslab.model._jax import traced_control_flow
from pallaslab.model._jax.equation_fields import call_site_of
from pallaslab.model._jax.trace import bind_eqn

COMPARES = ("lt", "le", "gt", "ge", "eq", "ne")
MASKS = (*COMPARES, "and", "or", "not")
CHOICES = ("select_n", "max", "min")
PASSED = ("with_memory_space_constraint",)  # identity when evaluated eagerly


@dataclasses.dataclass(frozen=True)
class Site:
    """One equation of the body, as the cause names it."""

    primitive: str
    line: str | None  # "path.py:N"


class BodyNotEvaluated(Exception):
    """The body cannot be evaluated here; the message says why, in the user's words."""


@dataclasses.dataclass(frozen=True)
class Flip:
    """A counterfactual: `site` (a boolean mask, or a two-way select's predicate) takes its
    other value where `where` is True (`where` has the site's shape)."""

    site: int
    where: np.ndarray


@dataclasses.dataclass(frozen=True)
class ProgramValues:
    """One program's evaluation: per mask or choice site, what it gave (a choice: which
    operand it took); per body output (ref values out), its values and the sites it flows
    from; per arithmetic site, the sites each operand flows from (body input k is -1 - k)."""

    features: dict[int, np.ndarray]
    out_deps: tuple[frozenset[int], ...]
    operand_deps: dict[int, tuple[frozenset[int], ...]]
    outputs: tuple[np.ndarray, ...] = ()


class BodyEvaluator:
    """Evaluates one kernel's body per program (raises on what it cannot evaluate)."""

    def __init__(self, eqn: Any) -> None:
        from jax._src.pallas import hlo_interpreter

        p = eqn.params
        self.gm = p["grid_mapping"]
        with self.gm.trace_env():
            body, consts = hlo_interpreter.resolve_physical_types(p["jaxpr"], ())
            self.body = state_discharge.discharge_state(body.with_consts(consts)
                                                        if consts else body)
        self.grid = tuple(int(g) for g in self.gm.grid)
        self.kept = [d for d in range(len(self.grid)) if d not in self.gm.vmapped_dims]
        self.sites: list[Site] = []
        self._site_of: dict[int, int] = {}

    def run(self, ids: Sequence[int], refs: Sequence[Any], flip: Flip | None = None
            ) -> ProgramValues:
        """`refs`: the body's ref values in order (scalars, blocks, outputs, scratch).
        Raises `BodyNotEvaluated` when a `while` loop reached its bound."""
        state = _State({}, {}, flip, traced_control_flow.Spins())
        deps = [frozenset({-1 - k}) for k in range(len(refs))]
        with self.gm.trace_env():
            outs, out_deps = self._eval(self.body, list(refs), deps, tuple(ids), state)
        state.spins.check(BodyNotEvaluated)
        return ProgramValues(state.features, tuple(out_deps), state.operand_deps,
                             tuple(np.asarray(x) for x in outs))

    def _site(self, eqn: Any) -> int:
        k = self._site_of.get(id(eqn))
        if k is None:
            k = self._site_of[id(eqn)] = len(self.sites)
            self.sites.append(Site(eqn.primitive.name, call_site_of(eqn)))
        return k

    def _eval(self, jaxpr: Any, args: list[Any], arg_deps: list[frozenset[int]],
              ids: tuple[int, ...], state: _State) -> tuple[list[Any], list[frozenset[int]]]:
        env: dict[Any, tuple[Any, frozenset[int]]] = {}

        def read(v: Any) -> tuple[Any, frozenset[int]]:
            return (v.val, frozenset()) if isinstance(v, jax_core.Literal) else env[v]

        env.update((v, (c, frozenset())) for v, c in zip(jaxpr.constvars, jaxpr.consts,
                                                          strict=True))
        env.update((v, a) for v, a in zip(jaxpr.invars, zip(args, arg_deps, strict=True),
                                          strict=True))
        for eqn in jaxpr.eqns:
            found = [read(v) for v in eqn.invars]
            outs, out_deps = self._equation(eqn, [x for x, _ in found], [d for _, d in found],
                                            ids, state)
            for v, x, d in zip(eqn.outvars, outs, out_deps, strict=True):
                if not isinstance(v, jax_core.DropVar):
                    env[v] = (x, d)
        found = [read(v) for v in jaxpr.outvars]
        return [x for x, _ in found], [d for _, d in found]

    def _equation(self, eqn: Any, invals: list[Any], in_deps: list[frozenset[int]],
                  ids: tuple[int, ...], state: _State
                  ) -> tuple[list[Any], list[frozenset[int]]]:
        name, site = eqn.primitive.name, self._site(eqn)
        joined = frozenset().union(*in_deps) | {site}
        if name == "program_id":
            return [np.int32(ids[self.kept[eqn.params["axis"]]])], [frozenset({site})]
        if name == "num_programs":
            return [np.int32(self.grid[self.kept[eqn.params["axis"]]])], [frozenset({site})]
        if name in PASSED:
            return list(invals), list(in_deps)
        if name == "cond":
            index = int(np.asarray(invals[0]))
            outs, deps = self._eval(eqn.params["branches"][index].jaxpr, invals[1:],
                                    in_deps[1:], ids, state)
            return outs, [d | in_deps[0] for d in deps]
        if name in ("pjit", "closed_call") and "jaxpr" in eqn.params:
            sub = eqn.params["jaxpr"]
            return self._eval(getattr(sub, "jaxpr", sub), invals, in_deps, ids, state)
        if state.flip is not None and state.flip.site == site:
            invals = _flipped_select(name, invals, state.flip.where)
        if name == "while":  # bounded: a loop that spins on these values must not hang
            outs = traced_control_flow.follow(eqn, invals, _evaluate, BodyNotEvaluated,
                                              state.spins)
        else:
            outs = bind_eqn(eqn, invals, eqn.params)
        if state.flip is not None and state.flip.site == site and name in MASKS:
            out = np.asarray(outs[0])
            outs = [np.where(state.flip.where, ~out, out) if out.dtype == bool else out]
        state.operand_deps[site] = tuple(in_deps)
        if name in MASKS:
            state.features[site] = np.asarray(outs[0])
        elif name == "select_n":
            state.features[site] = np.asarray(invals[0]).astype(np.int32)
        elif name in ("max", "min"):
            # which operand it took: a running max that moves takes its second
            state.features[site] = np.asarray(outs[0]) != np.asarray(invals[0])
        return list(outs), [joined] * len(outs)


def _flipped_select(name: str, invals: list[Any], where: np.ndarray) -> list[Any]:
    """A two-way select's operands with its predicate taking its other value at `where`."""
    if name != "select_n" or len(invals) != 3:
        return invals
    pred = np.asarray(invals[0])
    other = ~pred if pred.dtype == bool else (1 - pred).astype(pred.dtype)
    return [np.where(where, other, pred), *invals[1:]]


def _evaluate(jaxpr: Any, consts: Any, args: Sequence[Any]) -> list[Any]:
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    return list(jax_core.eval_jaxpr(inner, list(consts), *args))


@dataclasses.dataclass
class _State:
    features: dict[int, np.ndarray]
    operand_deps: dict[int, tuple[frozenset[int], ...]]
    flip: Flip | None
    spins: traced_control_flow.Spins

"""Nested pipelines whose index maps use the enclosing kernel's program ids.

`emit_pipeline` inside a gridded kernel usually picks its windows by the outer program
(`lambda j: (pl.program_id(0) * 4 + j, 0)`): the index maps close over values of the outer
body, which reach the primitive as its `all_index_map_consts`. Those values are computed here
from the outer program ids by re-running the outer body's equations that make them (program
ids, grid sizes, literals and pure scalar arithmetic; anything read from a ref at run time
cannot be known), so the inner pipeline is tiled over the outer grid x its own grid.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.numpy as jnp
from jax._src import core as jax_core

# Outer-body primitives that compute a scalar from scalars alone (no refs, no effects).
_PURE = frozenset({
    "add", "sub", "mul", "div", "rem", "max", "min", "neg", "abs", "sign", "select_n",
    "convert_element_type", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not",
    "shift_left", "shift_right_logical", "shift_right_arithmetic", "clamp", "floor_divide",
    "integer_pow", "pjit", "jit", "squeeze", "reshape", "broadcast_in_dim", "iota",
})

Closure = Callable[[Sequence[Any]], list[Any]]  # outer program ids -> the index maps' consts


def outer_closure(consts: Sequence[Any], defs: Mapping[Any, Any], aliases: Mapping[Any, Any],
                  outer_grid: Sequence[int]) -> Closure | None:
    """A function of the outer program ids giving the closed-over values, or None when one
    depends on something other than program ids and grid sizes."""
    needed: dict[Any, Any] = {}  # var -> its defining equation, in dependency order

    def visit(v: Any) -> bool:
        v = _resolve(v, aliases)
        if isinstance(v, jax_core.Literal) or v in needed:
            return True
        eqn = defs.get(v)
        if eqn is None:
            return False  # a parameter of the outer body (a ref): known only at run time
        name = eqn.primitive.name
        if name not in _PURE and name not in ("program_id", "num_programs"):
            return False
        if not all(visit(a) for a in eqn.invars):
            return False
        for out in eqn.outvars:
            needed[out] = eqn
        return True

    if not all(visit(c) for c in consts):
        return None
    order = list(dict.fromkeys(needed.values()))

    def closure(outer_ids: Sequence[Any]) -> list[Any]:
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            v = _resolve(v, aliases)
            return v.val if isinstance(v, jax_core.Literal) else env[v]

        for eqn in order:
            name = eqn.primitive.name
            if name == "program_id":
                outs = [outer_ids[eqn.params["axis"]]]
            elif name == "num_programs":
                outs = [jnp.int32(outer_grid[eqn.params["axis"]])]
            else:
                result = eqn.primitive.bind(*[read(a) for a in eqn.invars], **eqn.params)
                outs = list(result) if eqn.primitive.multiple_results else [result]
            env.update(zip(eqn.outvars, outs, strict=True))
        return [read(c) for c in consts]

    return closure


def _resolve(v: Any, aliases: Mapping[Any, Any]) -> Any:
    """The outer variable a sub-jaxpr's parameter stands for (control flow's operands)."""
    seen = 0
    while not isinstance(v, jax_core.Literal) and v in aliases and seen < 64:
        v, seen = aliases[v], seen + 1
    return v

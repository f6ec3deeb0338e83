"""Which of a traced call's flat arguments reach a kernel unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jax._src import core as jax_core

# Primitives whose sub-jaxpr runs once on the operands as given: an argument passes through.
_CALL_ONCE_NAMES = frozenset({"jit", "pjit", "closed_call", "core_call", "remat", "checkpoint"})


def argument_positions(closed_jaxpr: Any, eqn: Any, input_origins: Sequence[str],
                       leading: int) -> dict[str, int]:
    """Kernel input origin -> position among the traced call's flat arguments, for inputs that
    are one of those arguments unchanged (passed through `jit` and other call-once wrappers;
    not sliced, transposed, batched by a loop or computed). Caller-facing names hang off this.

    `eqn`: the kernel's equation; `input_origins`: its inputs' origins in operand order;
    `leading`: how many of its operands come before the inputs (dynamic grid bounds).
    """
    target = id(eqn)
    top = closed_jaxpr.jaxpr
    found: dict[int, list[int | None]] = {}

    def walk(jaxpr: Any, env: dict[Any, int]) -> bool:
        for e in jaxpr.eqns:
            if id(e) == target:
                found[0] = [env.get(v) if isinstance(v, jax_core.Var) else None
                            for v in e.invars]
                return True
            if e.primitive.name in _CALL_ONCE_NAMES:
                subs = [v for v in e.params.values()
                        if isinstance(v, jax_core.Jaxpr)]
                if len(subs) == 1:
                    sub = getattr(subs[0], "jaxpr", subs[0])
                    inner = {sv: env[v] for v, sv in zip(e.invars, sub.invars, strict=False)
                             if isinstance(v, jax_core.Var) and v in env}
                    if walk(sub, inner):
                        return True
        return False

    walk(top, {v: i for i, v in enumerate(top.invars)})
    positions = found.get(0)
    if positions is None:
        return {}
    return {origin: pos for origin, pos in zip(input_origins, positions[leading:], strict=False)
            if pos is not None}

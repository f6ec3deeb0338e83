"""Control flow inside a kernel body re-evaluated equation by equation under a trace: `cond`,
`while`, `scan` and calls, each branch or iteration's body run by the caller's own evaluator.

Used by the recorders that re-run a body with shadows beside its refs (`stores`,
`line_record`): they differ in what they do per equation, not in how control flow is followed.

They run in the caller's process, where no time limit can stop XLA, and sometimes on values
the real run never had (seeded operands, a refilled scratch): so every `while` loop is
bounded at `MAX_TRIPS` iterations, and a loop stopped by the bound is reported through the
caller's `Spins` (after the run), never taken for one that ended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import core as jax_core

# (jaxpr, consts, args) -> the jaxpr's outputs, evaluated by the recorder
Evaluate = Callable[[Any, Any, Sequence[Any]], list[Any]]
# Iterations one `while` loop may take in one program: far beyond the loops kernels run
# (a K loop over blocks), and seconds at most for a body that spins
MAX_TRIPS = 1 << 16


class Spins:
    """Whether any bounded loop of a re-run stopped at `MAX_TRIPS` (set by a host callback
    from inside the jitted run; read it after the run's outputs are ready)."""

    def __init__(self) -> None:
        self.hit = False

    def __call__(self, stopped: Any) -> None:
        self.hit = self.hit or bool(np.any(np.asarray(stopped)))

    def check(self, error: Callable[[str], Exception]) -> None:
        """Raise `error(reason)` if a loop was stopped by the bound."""
        jax.effects_barrier()
        if self.hit:
            raise error(f"a `while` loop in the body ran {MAX_TRIPS:,} iterations without "
                        "ending, and pallaslab stops there rather than hang (its end may depend "
                        "on values this re-run does not have)")


def subjaxprs(params: Any) -> list[Any]:
    """The jaxprs an equation's params hold (branches, loop bodies, called jaxprs)."""
    return [sub for value in params.values()
            for sub in (value if isinstance(value, tuple) else (value,))
            if isinstance(sub, jax_core.Jaxpr)]


def follow(eqn: Any, invals: list[Any], run: Evaluate,
           cannot: Callable[[str], Exception], spins: Spins) -> list[Any]:
    """`eqn`'s outputs with its inner jaxprs evaluated by `run`; `cannot(name)`: the error
    for a primitive whose inner jaxprs cannot be followed; `spins`: told of a `while` loop
    stopped at `MAX_TRIPS`."""
    name, p = eqn.primitive.name, eqn.params
    if name == "cond":
        index, *ops = invals
        types = [v.aval for v in eqn.outvars]
        return list(lax.switch(index, [
            (lambda b=b: like(run(b, b.consts, ops), types)) for b in p["branches"]]))
    if name == "while":
        return _bounded_while(p, invals, run, spins)
    if name == "scan":
        return _scan(p, invals, run)
    subs = subjaxprs(p)
    if len(subs) == 1 and len(subs[0].invars) == len(invals) and len(
            subs[0].outvars) == len(eqn.outvars):  # a call (jit, checkpoint): inlined
        return run(subs[0], subs[0].consts, invals)
    raise cannot(name)


def _bounded_while(p: Any, invals: list[Any], run: Evaluate, spins: Spins) -> list[Any]:
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cc, bc, carry = invals[:cn], invals[cn:cn + bn], invals[cn + bn:]
    cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
    types = [v.aval for v in bj.outvars]

    def going(kc: tuple[Any, list[Any]]) -> Any:
        return (kc[0] < MAX_TRIPS) & run(cj, cj.consts, [*cc, *kc[1]])[0]

    def step(kc: tuple[Any, list[Any]]) -> tuple[Any, list[Any]]:
        return kc[0] + 1, like(run(bj, bj.consts, [*bc, *kc[1]]), types)

    trips, final = lax.while_loop(going, step, (jnp.int32(0), like(carry, types)))
    jax.debug.callback(spins, trips >= MAX_TRIPS)
    return list(final)


def _scan(p: Any, invals: list[Any], run: Evaluate) -> list[Any]:
    consts, carry, xs = (list(part) for part in p["ft_in"].update(invals).unpack())
    ncarry = len(carry)
    j = p["jaxpr"]
    types = [v.aval for v in j.outvars[:ncarry]]

    def step(c: list[Any], x: list[Any]) -> tuple[list[Any], list[Any]]:
        outs = run(j, j.consts, [*consts, *c, *x])
        return like(outs[:ncarry], types), outs[ncarry:]

    final, ys = lax.scan(step, like(carry, types), xs, length=p["length"],
                         reverse=p["reverse"], unroll=p["unroll"])
    return [*final, *ys]


def like(values: Sequence[Any], avals: Sequence[Any]) -> list[Any]:
    """`values` in `avals`' dtypes (a loop's carry keeps its type across iterations)."""
    return [lax.convert_element_type(x, a.dtype) for x, a in zip(values, avals, strict=True)]

"""Control flow inside a kernel body re-evaluated equation by equation under a trace: `cond`,
`while`, `scan` and calls, each branch or iteration's body run by the caller's own evaluator.

Used by the recorders that re-run a body with shadows beside its refs (`block_accesses`,
`line_record`): they differ in what they do per equation, not in how control flow is followed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jax import lax
from jax._src import core as jax_core

# (jaxpr, consts, args) -> the jaxpr's outputs, evaluated by the recorder
Evaluate = Callable[[Any, Any, Sequence[Any]], list[Any]]


def subjaxprs(params: Any) -> list[Any]:
    """The jaxprs an equation's params hold (branches, loop bodies, called jaxprs)."""
    return [sub for value in params.values()
            for sub in (value if isinstance(value, tuple) else (value,))
            if isinstance(sub, jax_core.Jaxpr)]


def follow(eqn: Any, invals: list[Any], run: Evaluate,
           cannot: Callable[[str], Exception]) -> list[Any]:
    """`eqn`'s outputs with its inner jaxprs evaluated by `run`; `cannot(name)`: the error
    for a primitive whose inner jaxprs cannot be followed."""
    name, p = eqn.primitive.name, eqn.params
    if name == "cond":
        index, *ops = invals
        types = [v.aval for v in eqn.outvars]
        return list(lax.switch(index, [
            (lambda b=b: like(run(b, b.consts, ops), types)) for b in p["branches"]]))
    if name == "while":
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cc, bc, carry = invals[:cn], invals[cn:cn + bn], invals[cn + bn:]
        cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
        types = [v.aval for v in bj.outvars]
        return list(lax.while_loop(
            lambda c: run(cj, cj.consts, [*cc, *c])[0],
            lambda c: like(run(bj, bj.consts, [*bc, *c]), types),
            like(carry, types)))
    if name == "scan":
        return _scan(p, invals, run)
    subs = subjaxprs(p)
    if len(subs) == 1 and len(subs[0].invars) == len(invals) and len(
            subs[0].outvars) == len(eqn.outvars):  # a call (jit, checkpoint): inlined
        return run(subs[0], subs[0].consts, invals)
    raise cannot(name)


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

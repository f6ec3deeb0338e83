"""DMA semaphores passed between `pallas_call`s, run in program order: JAX's async-copy
pattern, where one `pallas_call` starts a copy and returns its DMA semaphore (and the copy's
destination) and a later one waits on it.

Neither of JAX's interpreters runs it (`execute/executors/semaphore_refusals.py` says why).
pallaslab's interpreted run replaces each `pallas_call` that returns or takes a semaphore in
its copy of the jaxpr (no rule of JAX's is registered or replaced) by its own grid loop
(`bounded_slices.run`), with each semaphore operand as its count. The semantics are the TPU's
as Pallas documents them: a DMA started in one kernel is in flight when the kernel ends, and
its destination holds the copy once a wait on its semaphore has returned. Here the copy
completes at the wait, in program order: the starting call's outputs are what they are
*without* its copies of cross-call semaphores (a destination nothing else wrote stays
uninitialized: NaN, the integer minimum), and the call that waits on the semaphore sees them
*with* the copies, as they were made when the copy started. A kernel that never waits leaves
its destination uninitialized, so a missing wait shows as wrong output.

Not modelled: a wait is recognised per kernel (a kernel with a `dma_wait` anywhere completes
the copies of every semaphore it takes, whether or not the wait runs), a read of the
destination in the waiting kernel before its wait sees the copy, and a semaphore passed
through a loop between the two calls is not followed (a `jit` or `named_call` between them is
inlined).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from pallaslab.model._jax import bounded_slices, rewrite

NOTE = ("DMA semaphores passed between pallas_calls run in program order: a copy started in "
        "one kernel completes at the wait on its semaphore in a later kernel (its destination "
        "stays uninitialized until then); a read of the destination before the wait inside "
        "the waiting kernel, and the wait's own condition, are not modelled")


@dataclasses.dataclass
class Pending:
    """A semaphore returned by a `pallas_call`: its count, and for each output the starting
    call returned (by the returned value's id: it flows unchanged through the `jit`s between
    the calls), that value and the one with the call's copies made, given to the call that
    waits."""
    count: Any
    copied: dict[int, tuple[Any, Any]]


def _kernel_invars_of_semaphores(eqn: Any, outputs: bool) -> list[Any]:
    """The kernel body's ref variables of this call's semaphore inputs (or outputs)."""
    body = eqn.params["jaxpr"]
    mapping = eqn.params["grid_mapping"]
    n_in = len(eqn.invars) - mapping.num_dynamic_grid_bounds
    if outputs:
        return [body.invars[n_in + j] for j, v in enumerate(eqn.outvars)
                if bounded_slices.is_semaphore(v.aval)]
    return [body.invars[i - mapping.num_dynamic_grid_bounds]
            for i, v in enumerate(eqn.invars)
            if bounded_slices.is_semaphore(v.aval)]


def passes_semaphores(eqn: Any) -> bool:
    """Is this a `pallas_call` that returns or takes a semaphore?"""
    return eqn.primitive.name == "pallas_call" and any(
        bounded_slices.is_semaphore(v.aval) for v in (*eqn.invars, *eqn.outvars))


def _carries_semaphores(eqn: Any) -> bool:
    """A call (`jit`, `named_call`) that returns or takes a semaphore: inlined, so the
    semaphore's count and copies flow on to the kernel that waits."""
    return eqn.primitive.name != "pallas_call" and "jaxpr" in eqn.params and any(
        bounded_slices.is_semaphore(v.aval) for v in (*eqn.invars, *eqn.outvars))


def _matches(eqn: Any) -> bool:
    return passes_semaphores(eqn) or _carries_semaphores(eqn)


def run_notes(eqns: Iterable[Any]) -> tuple[str, ...]:
    """The note a run of these kernel equations carries: `NOTE` when one passes a
    semaphore."""
    return (NOTE,) if any(passes_semaphores(e) for e in eqns) else ()


def with_semaphores_in_order(closed_jaxpr: Any) -> Any:
    """`closed_jaxpr` with each `pallas_call` that returns or takes a semaphore run in
    program order (see the module's docstring); unchanged when there is none."""
    if not rewrite.contains(closed_jaxpr, passes_semaphores):
        return closed_jaxpr
    return rewrite.retrace_replacing(closed_jaxpr, _matches, _run)


def _waits(jaxpr: Any) -> bool:
    return rewrite.contains(jaxpr, lambda e: e.primitive.name == "dma_wait")


def _without_starts(eqn: Any) -> Any:
    """`eqn` whose body starts no copy on a semaphore it returns (top-level starts only)."""
    sems = _kernel_invars_of_semaphores(eqn, outputs=True)
    body = eqn.params["jaxpr"]

    def starts_one(e: Any) -> bool:
        return e.primitive.name == "dma_start" and any(
            any(v is s for s in sems) for v in e.invars)

    nested = [e for e in body.eqns if not starts_one(e) and any(
        rewrite.contains(sub, lambda x: x.primitive.name == "dma_start")
        for sub in _subjaxprs(e))]
    if nested:
        raise NotImplementedError("a copy started on a returned semaphore inside control flow "
                                  "(pl.when, a loop) is not followed")
    return eqn.replace(params={**eqn.params, "jaxpr": body.replace(
        eqns=[e for e in body.eqns if not starts_one(e)])})


def _subjaxprs(eqn: Any) -> list[Any]:
    found = []
    for value in eqn.params.values():
        for v in (value if isinstance(value, tuple) else (value,)):
            if hasattr(v, "eqns"):
                found.append(v)
    return found


def kernel_inputs(eqn: Any, invals: list[Any]) -> list[Any]:
    """What the `pallas_call` `eqn` runs on, given its operands as this module's run left
    them: a semaphore as its count; where the kernel waits, each output of a starting call
    as that call's copies made it."""
    pending = [x for x in invals if isinstance(x, Pending)]
    if pending and _waits(eqn.params["jaxpr"]):
        copied: dict[int, tuple[Any, Any]] = {}
        for p in pending:
            copied.update(p.copied)
        invals = [copied[id(x)][1] if id(x) in copied and copied[id(x)][0] is x else x
                  for x in invals]
    return [x.count if isinstance(x, Pending) else x for x in invals]


def run_in_order(eqn: Any, invals: list[Any]) -> list[Any]:
    """The outputs of a `pallas_call` that passes semaphores, run as `with_semaphores_in_order`
    runs it (a semaphore it returns is a `Pending`, for `kernel_inputs` of the call that
    takes it)."""
    return _run(eqn, invals)


def _run(eqn: Any, invals: list[Any]) -> list[Any]:
    if _carries_semaphores(eqn):  # a jit between the kernels: its body, inline
        inner = eqn.params["jaxpr"]
        return rewrite.eval_replacing(inner, inner.consts, invals, _matches, _run)
    invals = kernel_inputs(eqn, invals)
    with_copies = bounded_slices.run(eqn, invals)
    if not any(bounded_slices.is_semaphore(v.aval) for v in eqn.outvars):
        return with_copies
    without = bounded_slices.run(_without_starts(eqn), invals)
    copied = {id(y): (y, x) for v, x, y in zip(eqn.outvars, with_copies, without, strict=True)
              if not bounded_slices.is_semaphore(v.aval)}
    return [Pending(x, copied) if bounded_slices.is_semaphore(v.aval) else y
            for v, x, y in zip(eqn.outvars, with_copies, without, strict=True)]


def user_of(kernel: Any, output: Any, kernels: Iterable[Any]) -> tuple[Any, Any] | None:
    """The kernel (and its input operand) that takes `output` of `kernel`, traced through the
    jaxpr's variables (None when another equation, or a `jit`, stands between them)."""
    if kernel.handle is None:
        return None
    var = kernel.handle.eqn.outvars[kernel.outputs.index(output)]
    for other in kernels:
        if other is kernel or other.handle is None:
            continue
        for i, invar in enumerate(other.handle.eqn.invars):
            if invar is var and i < len(other.inputs):
                return other, other.inputs[i]
    return None

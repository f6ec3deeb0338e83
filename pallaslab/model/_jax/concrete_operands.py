"""Concrete values of dynamic grid bounds and scalar-prefetch operands: the computation
before a kernel run on the CPU, earlier kernels included (under the HLO interpreter, or in
program order where they pass a DMA semaphore between them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pallaslab.model._jax import cross_call_semaphores as semaphores
from pallaslab.model._jax.base import KERNEL_PRIMITIVES, PALLAS_CALL, Jaxpr
from pallaslab.model._jax.equation_fields import is_numpy_dtype
from pallaslab.model._jax.trace import (
    bind_eqn,
    contains_kernel,
    interpret_jaxpr,
    leading_operand_count,
)


@dataclasses.dataclass(frozen=True)
class ConcreteOperands:
    """Leading operands (dynamic grid bounds, scalar prefetch) of the wanted kernels that
    could be evaluated, and why the others could not."""

    values: dict[int, list[np.ndarray]]
    reasons: dict[int, str]


def concrete_kernel_operands(
    closed_jaxpr: Jaxpr, flat_args: Sequence[Any], wanted: set[int]
) -> ConcreteOperands:
    """Evaluate, with concrete arguments, the leading operands of the wanted kernel equations.

    The computation before them runs on the CPU, earlier `pallas_call`s included (under the
    HLO interpreter), so a grid or scalar-prefetch values computed by an earlier kernel are
    known. What cannot run here — a mesh kernel, a kernel inside a loop or conditional, a
    kernel the interpreter rejects — taints what it computes, and a wanted kernel reading a
    tainted value gets the reason instead of values.
    """
    found: dict[int, list[np.ndarray]] = {}
    reasons: dict[int, str] = {}
    tainted: dict[int, tuple[Any, str]] = {}  # id -> (value kept alive, why it is unknown)

    def taint_of(ins: list[Any]) -> str | None:
        return next((tainted[id(x)][1] for x in ins if id(x) in tainted), None)

    def eval_eqn(eqn: Any, ins: list[Any]) -> list[Any]:
        why = taint_of(ins)
        is_kernel = eqn.primitive in KERNEL_PRIMITIVES
        if is_kernel and id(eqn) in wanted:
            if why is None:
                found[id(eqn)] = [np.asarray(x) for x in ins[: leading_operand_count(eqn)]]
            else:
                reasons[id(eqn)] = why
        if len(found) + len(reasons) == len(wanted):  # nothing left to evaluate
            return _zeros_like_outputs(eqn)
        if is_kernel or contains_kernel(eqn.params):
            outs, why = _run_kernel_here(eqn, ins, why)
        else:
            outs = bind_eqn(eqn, ins, eqn.params)
        if why is not None:
            tainted.update((id(x), (x, why)) for x in outs)
        return outs

    with jax.default_device(jax.devices("cpu")[0]):
        interpret_jaxpr(closed_jaxpr, flat_args, eval_eqn)
    for missed in wanted - found.keys() - reasons.keys():
        reasons[missed] = ("the kernel runs inside a loop or conditional, whose operands "
                           "capture does not evaluate")
    return ConcreteOperands(found, reasons)


def _run_kernel_here(eqn: Any, ins: list[Any], why: str | None) -> tuple[list[Any], str | None]:
    """(outputs, None) of a kernel run under the HLO interpreter, or (zeros, why not)."""
    name = _kernel_name(eqn)
    if why is not None:
        return _zeros_like_outputs(eqn), why
    if eqn.primitive is not PALLAS_CALL:
        what = "a loop or conditional" if eqn.primitive not in KERNEL_PRIMITIVES else \
            f"the {eqn.primitive.name} kernel {name}"
        return _zeros_like_outputs(eqn), (
            f"they are computed from the output of {what}, which capture does not run")
    try:
        if semaphores.passes_semaphores(eqn):  # as interpret runs it: in program order
            return semaphores.run_in_order(eqn, ins), None
        params = {**eqn.params, "interpret": eqn.params.get("interpret") or True}
        return jax.block_until_ready(bind_eqn(eqn, ins, params)), None
    except Exception as err:  # the earlier kernel fails here: say so, keep capturing
        line = (str(err).strip().splitlines() or [""])[0][:160]
        return _zeros_like_outputs(eqn), (
            f"they are computed from the output of kernel {name}, which failed under the "
            f"interpreter here ({type(err).__name__}: {line})")


def _kernel_name(eqn: Any) -> str:
    info = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    return repr(getattr(info, "func_name", None) or eqn.primitive.name)


def _zeros_like_outputs(eqn: Any) -> list[Any]:
    """Stand-ins for outputs we do not compute (kernels are never run during capture)."""
    avals: list[Any] = [v.aval for v in eqn.outvars]
    # A semaphore output (a DMA waited in a later kernel) has no values: int32 stands in.
    return [jnp.zeros(a.shape, a.dtype if is_numpy_dtype(a.dtype) else jnp.int32)
            for a in avals]

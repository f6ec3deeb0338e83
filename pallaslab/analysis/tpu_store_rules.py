"""Mosaic TPU's rules on the stores a kernel body makes, judged from its jaxpr without a
target: a masked store (`pltpu.store(ref, x, mask=...)`, `pl.store(..., mask=...)`) of data
that is not 32-bit (bf16, int8, bool, ...) is refused by JAX's TPU lowering ("masked swap
with non-32-bit data"), wherever in the body it is (loops and branches included).

Like the block-shape rules, it applies to kernels written for TPU (TPU compiler params, or
none) with no target named, and is a warning on a kernel written for the interpreter only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from pallaslab.analysis.finding import Finding
from pallaslab.model import Kernel
from pallaslab.model._jax.equation_fields import call_site_of
from pallaslab.model.source_names import short_source

MASKED_STORE = "masked_swap"  # the primitive of a store with a mask


def tpu_masked_store_dtype(kernel: Kernel) -> list[Finding]:
    """One `tpu-masked-store-dtype` error per (ref, dtype, line) masked store whose data is
    not 32-bit, in a pallas_call or TPU mesh kernel's body (nested pipelines are in their
    outer kernel's body)."""
    if kernel.kind not in ("pallas_call", "mesh") or kernel.handle is None:
        return []
    body = kernel.handle.eqn.params.get("jaxpr")
    body = getattr(body, "jaxpr", body)  # a ClosedJaxpr's jaxpr
    if body is None or not hasattr(body, "eqns"):
        return []
    operands = {id(v): op for v, op in zip(body.invars, kernel.operands, strict=False)} \
        if len(body.invars) == len(kernel.operands) else {}
    found: dict[tuple[str, str | None, str, str | None], None] = {}
    for eqn, names in _equations(body, operands):
        if eqn.primitive.name != MASKED_STORE or "args_tree" not in eqn.params:
            continue
        ref, _, value, mask = eqn.params["args_tree"].unflatten(eqn.invars)
        dtype = getattr(getattr(value, "aval", None), "dtype", None)
        if mask is None or dtype is None or np.dtype(dtype).itemsize == 4:
            continue
        op = names.get(id(ref))
        name = (f"{op.param} ({op.origin})" if op.param else op.origin) if op else "a ref"
        found.setdefault((name, op.origin if op else None, str(np.dtype(dtype)),
                          call_site_of(eqn)))
    return [_finding(kernel, *key) for key in found]


def _equations(jaxpr: Any, names: dict[int, Any]) -> Iterator[tuple[Any, dict[int, Any]]]:
    """Every equation of `jaxpr` and of the jaxprs in its equations' params, at any depth,
    with the operands its vars are (`names`: id(var) -> Operand). A nested jaxpr's inputs
    are matched to its equation's last inputs (loops, branches and calls pass their operands
    last) where their types agree; others are unnamed."""
    for eqn in jaxpr.eqns:
        yield eqn, names
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's jaxpr
                if hasattr(sub, "eqns"):
                    yield from _equations(sub, _passed(eqn, sub, names))


def _passed(eqn: Any, sub: Any, names: dict[int, Any]) -> dict[int, Any]:
    inner, outer = list(sub.invars), list(eqn.invars)
    if len(inner) > len(outer):
        return {}
    return {id(i): names[id(o)] for i, o in zip(inner, outer[len(outer) - len(inner):],
                                                strict=True)
            if id(o) in names and getattr(i, "aval", None) == getattr(o, "aval", None)}


def _finding(kernel: Kernel, name: str, origin: str | None, dtype: str, site: str | None
             ) -> Finding:
    at = f" at {short_source(site)}" if site else ""
    return Finding(
        "tpu-masked-store-dtype", "error",
        f"{kernel.name}: a masked store of {dtype} data into {name}{at}: Mosaic TPU lowers "
        "masked stores of 32-bit data only (JAX's TPU lowering: \"NotImplementedError: masked "
        "swap with non-32-bit data\"). Rule: store unmasked, keeping the old values where the "
        "mask is off (ref[...] = jnp.where(mask, x, ref[...])), or store into a 32-bit ref.",
        operand=origin)

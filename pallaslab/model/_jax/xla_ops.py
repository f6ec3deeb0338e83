"""The XLA work a call does between its kernels: what crosses HBM outside the pallas_calls.

XLA fuses chains of elementwise ops and reductions, so the values a fusion keeps in registers
never reach HBM; what does is each array an XLA op reads from a kernel's output or from the
call's arguments, and each array XLA computes that a kernel then reads or that the call
returns. `xla_boundary_bytes` counts those arrays, once each, walking through calls (`jit`,
`custom_vjp`, ...) as if they were inlined; reshapes are free (a bitcast of the same bytes).
A loop, conditional or other opaque equation counts as one XLA op on its operands and results.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pallaslab.model._jax.base import CALL_ONCE, KERNEL_PRIMITIVES
from pallaslab.model._jax.trace import all_sub_jaxprs

# Ops that change no bytes: XLA emits them as bitcasts of the same buffer.
_FREE = frozenset({"reshape", "squeeze", "expand_dims"})


@dataclasses.dataclass(frozen=True)
class XlaTraffic:
    """Bytes XLA moves through HBM outside the kernels, and the primitives that move them."""

    read_bytes: int  # kernel outputs and call arguments that XLA ops read
    written_bytes: int  # XLA results that kernels read or the call returns
    primitives: tuple[str, ...]  # the XLA ops on the boundary, in order, once each
    results: int = 0  # XLA results written to HBM: at least one launched fusion each

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.written_bytes


def xla_boundary_bytes(closed_jaxpr: Any) -> XlaTraffic:
    walk = _Walk()
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    for v in jaxpr.invars:
        walk.source[v] = ("arg", v)
    walk.eqns(jaxpr)
    for v in jaxpr.outvars:
        walk.write(v)
    return XlaTraffic(sum(_nbytes(v) for v in walk.read.values()),
                      sum(_nbytes(v) for v in walk.written.values()),
                      tuple(dict.fromkeys(walk.prims)), len(walk.written))


class _Walk:
    def __init__(self) -> None:
        # var -> (who made it: "arg" | "kernel" | "xla", the var that holds its bytes)
        self.source: dict[Any, tuple[str, Any]] = {}
        self.read: dict[int, Any] = {}
        self.written: dict[int, Any] = {}
        self.prims: list[str] = []

    def origin(self, v: Any) -> tuple[str, Any] | None:
        if not hasattr(v, "aval") or type(v).__name__ == "Literal":
            return None
        return self.source.get(v, ("arg", v))

    def write(self, v: Any) -> None:
        o = self.origin(v)
        if o is not None and o[0] == "xla":
            self.written[id(o[1])] = o[1]

    def eqns(self, jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            self.eqn(eqn)

    def eqn(self, eqn: Any) -> None:
        name = eqn.primitive.name
        if eqn.primitive in KERNEL_PRIMITIVES:
            for v in eqn.invars:
                self.write(v)
            for v in eqn.outvars:
                self.source[v] = ("kernel", v)
            return
        subs = list(all_sub_jaxprs(eqn.params))
        if name in CALL_ONCE and len(subs) == 1:
            inner = getattr(subs[0], "jaxpr", subs[0])
            if len(inner.invars) == len(eqn.invars) and len(inner.outvars) == len(eqn.outvars):
                for outer, v in zip(eqn.invars, inner.invars, strict=True):
                    o = self.origin(outer)
                    self.source[v] = o if o is not None else ("xla", v)
                self.eqns(inner)
                for outer, v in zip(eqn.outvars, inner.outvars, strict=True):
                    o = self.origin(v)
                    self.source[outer] = o if o is not None else ("xla", outer)
                return
        if name in _FREE and len(eqn.invars) >= 1 and len(eqn.outvars) == 1:
            o = self.origin(eqn.invars[0])
            if o is not None:
                self.source[eqn.outvars[0]] = o
                return
        for v in eqn.invars:
            o = self.origin(v)
            if o is not None and o[0] != "xla":
                self.read[id(o[1])] = o[1]
                self.prims.append(name)
        for v in eqn.outvars:
            self.source[v] = ("xla", v)


def _nbytes(v: Any) -> int:
    aval = v.aval
    shape = getattr(aval, "shape", ())
    dtype = getattr(aval, "dtype", None)
    itemsize = getattr(dtype, "itemsize", 4) if dtype is not None else 0
    return int(math.prod(shape)) * int(itemsize)

"""Kernels that are not Pallas: calls to code compiled elsewhere (jax_triton's `triton_call`,
JAX's FFI, XLA custom calls), named when a capture finds no Pallas kernel. A `triton_call`
is never captured as a kernel, but its launch is plain data on the jaxpr equation (its grid,
its warps and pipeline stages, the arrays it reads and writes), which is what the GPU time
model needs."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from pallaslab.model._jax.trace import all_sub_jaxprs

TRITON_CALL = "triton_kernel_call"  # jax_triton's primitive
# Primitives that call code compiled elsewhere, and the parameter that names what they call.
_FOREIGN_CALLS = {TRITON_CALL: "a Triton", "ffi_call": "an FFI", "custom_call": "an XLA"}
_CALL_NAMES = ("name", "kernel_name", "target_name", "call_target_name")


def foreign_calls(closed_jaxpr: Any) -> list[tuple[str, str]]:
    """(kind, name) of every call to a non-Pallas kernel ("a Triton", "add_kernel"), in order."""
    found = []
    for eqn in _eqns(getattr(closed_jaxpr, "jaxpr", closed_jaxpr)):
        kind = _FOREIGN_CALLS.get(eqn.primitive.name)
        if kind is None and "custom_call" in eqn.primitive.name:
            kind = "an XLA"
        if kind is not None:
            found.append((kind, _call_name(eqn)))
    return found


def _call_name(eqn: Any) -> str:
    """What a foreign call calls: its name parameter, else its Triton function's name."""
    named = next((str(eqn.params[p]) for p in _CALL_NAMES if eqn.params.get(p)), None)
    return named or getattr(eqn.params.get("fn"), "__name__", None) or eqn.primitive.name


@dataclasses.dataclass(frozen=True)
class TritonLaunch:
    """One `triton_call`: the kernel's name, its grid of programs, its launch options and the
    arrays it reads and writes, as (shape, dtype)."""

    name: str
    grid: tuple[int, ...]
    num_warps: int
    num_stages: int
    inputs: tuple[tuple[tuple[int, ...], np.dtype], ...]
    outputs: tuple[tuple[tuple[int, ...], np.dtype], ...]

    @property
    def programs(self) -> int:
        return math.prod(self.grid)

    @property
    def hbm_bytes(self) -> int:
        """Every array read and written once (re-reads by several programs: L2 hits)."""
        return sum(math.prod(s) * d.itemsize for s, d in (*self.inputs, *self.outputs))


def triton_launches(closed_jaxpr: Any) -> tuple[TritonLaunch, ...]:
    """Every `triton_call` launch in `closed_jaxpr`, in order, descending into sub-jaxprs."""
    return tuple(_launch(eqn) for eqn in _eqns(getattr(closed_jaxpr, "jaxpr", closed_jaxpr))
                 if eqn.primitive.name == TRITON_CALL)


def trace_triton_launches(fn: Callable[..., Any],
                          *args: Any) -> tuple[tuple[TritonLaunch, ...], Any]:
    """`fn(*args)` traced (nothing runs): its `triton_call` launches and its closed jaxpr."""
    closed = jax.make_jaxpr(fn)(*args)
    return triton_launches(closed), closed


def _eqns(jaxpr: Any) -> Iterator[Any]:
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in all_sub_jaxprs(eqn.params):
            yield from _eqns(getattr(sub, "jaxpr", sub))


def _launch(eqn: Any) -> TritonLaunch:
    p = eqn.params
    options = dict(p.get("backend_options") or {})
    grid = p.get("grid") or (1,)
    return TritonLaunch(
        name=_call_name(eqn),
        grid=tuple(int(g) for g in (grid if isinstance(grid, tuple) else (grid,))),
        num_warps=int(options.get("num_warps") or 4),
        num_stages=int(options.get("num_stages") or 3),
        inputs=tuple(_array(v.aval) for v in eqn.invars if hasattr(v.aval, "shape")),
        outputs=tuple(_array(v.aval) for v in eqn.outvars if hasattr(v.aval, "shape")))


def _array(aval: Any) -> tuple[tuple[int, ...], np.dtype]:
    return tuple(int(d) for d in aval.shape), np.dtype(aval.dtype)

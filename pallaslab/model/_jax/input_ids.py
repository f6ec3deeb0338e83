"""Which function argument element each element of a kernel's inputs holds.

A library's public function rarely hands its arguments to a kernel as they are: it
transposes, reshapes, squeezes, pads or casts them first (and a `vmap` of the kernel becomes
one kernel over the batched arrays). To judge a kernel input's index map against the blocks
the reference needs of the *arguments*, the jaxpr is evaluated up to the kernel with every
floating argument replaced by its element ids (numbered across the arguments): the ids travel
through the equations that move or keep elements (`element_ids.follow_ids`) to the kernel's
operands. Everything not derived from an argument is evaluated on the real values; kernels
are never run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from pallaslab.model._jax.base import KERNEL_PRIMITIVES
from pallaslab.model._jax.element_ids import Ids, follow_ids, numbered_source
from pallaslab.model._jax.trace import interpret_jaxpr

_UNMAPPED = -1


@dataclasses.dataclass(frozen=True)
class InputTrace:
    """One kernel input traced forward from the function argument its elements came from."""

    argument: int  # the argument's position among the call's flat arguments
    ids: np.ndarray  # int, the kernel input's shape: flat index into the argument, -1: none
    through: tuple[str, ...]  # the equations on the way ("transpose", "reshape"), in order

    def from_argument(self, values: np.ndarray, fill: Any) -> np.ndarray:
        """Per argument element values, at the kernel input's elements."""
        flat = np.asarray(values).reshape(-1)
        return np.where(self.ids >= 0, flat[np.maximum(self.ids, 0)], fill)


class _Reached(Exception):
    def __init__(self, ins: list[Any]) -> None:
        super().__init__("kernel reached")
        self.ins = ins


def trace_inputs(closed_jaxpr: Any, flat_args: Sequence[Any], eqn: Any, leading: int
                 ) -> dict[int, InputTrace]:
    """Per kernel input (its position after the `leading` operands, the dynamic grid
    bounds) that holds elements of one floating argument: where they came from."""
    starts: list[tuple[int, int, int, tuple[int, ...]]] = []
    args: list[Any] = []
    nxt = 0
    for pos, a in enumerate(flat_args):
        shape = tuple(int(d) for d in np.shape(a))
        if not jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating):
            args.append(a)
            continue
        size = int(np.prod(shape))
        starts.append((nxt, -1, pos, shape))
        args.append(Ids(np.arange(nxt, nxt + size, dtype=np.int32).reshape(shape), ()))
        nxt += size

    def eval_eqn(e: Any, ins: list[Any]) -> list[Any]:
        if e is eqn:
            raise _Reached(ins)
        if e.primitive in KERNEL_PRIMITIVES:  # another kernel: its outputs hold no argument
            return [jnp.zeros(v.aval.shape, v.aval.dtype) for v in e.outvars]
        return follow_ids(e, ins)

    try:
        interpret_jaxpr(closed_jaxpr, list(flat_args) if not starts else args, eval_eqn)
    except _Reached as reached:
        return _traces(reached.ins[leading:], starts)
    return {}


def _traces(ins: list[Any], starts: list[tuple[int, int, int, tuple[int, ...]]]
            ) -> dict[int, InputTrace]:
    found = {}
    for n, x in enumerate(ins):
        if not isinstance(x, Ids) or not (x.ids >= 0).any():
            continue
        src = numbered_source(starts, x.ids[x.ids >= 0])
        if src is None:
            continue  # elements of several arguments (a concatenation of q and k)
        start, _, pos, _ = src
        ids = np.where(x.ids >= 0, x.ids - start, _UNMAPPED).astype(np.int64)
        found[n] = InputTrace(pos, ids, x.through)
    return found

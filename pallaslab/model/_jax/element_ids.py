"""Which kernel output element each element of the traced function's outputs came from.

A library's public function rarely returns a kernel's output as it is: it transposes,
reshapes, squeezes, slices, pads or casts it first. To name the programs that wrote a wrong
element of such an output, the jaxpr is evaluated once more with every kernel output
replaced by its *element ids* (0 .. size-1, numbered across all kernel outputs): an
equation that only moves elements (transpose, reshape, slice, pad, concatenate, gather, ...)
is bound on the ids themselves, so the ids travel to where the values would; an elementwise
equation keeps each element's id (a cast, `x * 2`, `x + bias`); an equation that combines
several kernel elements into one (a sum, a dot, a cumsum) stops the mapping and says so.
Everything that does not depend on a kernel output is evaluated on the real arguments (the
indices of a dynamic slice, a select's mask); kernels are never run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from pallaslab.model._jax.base import KERNEL_PRIMITIVES
from pallaslab.model._jax.trace import bind_eqn, contains_kernel, interpret_jaxpr
from pallaslab.model.kernel import Kernel

# Equations that move elements without combining them: bound on the ids. Per primitive, the
# operands that are not data (indices, a select's predicate): evaluated on the real values.
_MOVES: dict[str, tuple[int, ...]] = {
    "transpose": (), "reshape": (), "squeeze": (), "expand_dims": (), "broadcast_in_dim": (),
    "slice": (), "pad": (), "concatenate": (), "rev": (), "copy": (), "copy_p": (),
    "split": (), "dynamic_slice": (), "dynamic_update_slice": (), "gather": (1,),
    "select_n": (0,),
}
# Equations whose output element i depends on their operands' element i only.
_ELEMENTWISE = frozenset({
    "convert_element_type", "reduce_precision", "neg", "abs", "sign", "exp", "exp2", "log",
    "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "sqrt", "rsqrt", "cbrt",
    "floor", "ceil", "round", "is_finite", "erf", "erfc", "erf_inv", "integer_pow", "square",
    "not", "real", "imag", "conj", "add", "sub", "mul", "div", "rem", "pow", "max", "min",
    "atan2", "and", "or", "xor", "eq", "ne", "lt", "le", "gt", "ge", "nextafter", "clamp",
    "stop_gradient", "optimization_barrier", "device_put",
})
_UNMAPPED = -1  # an output element no kernel element became (padding, another array)


@dataclasses.dataclass(frozen=True)
class ElementTrace:
    """One function output traced back to the kernel output its elements came from."""

    kernel: int  # the kernel's index in the capture
    output: int  # its output position
    kernel_shape: tuple[int, ...]
    ids: np.ndarray  # int, the function output's shape: flat index into the kernel output, -1
    through: tuple[str, ...]  # the equations on the way ("transpose", "slice"), in order

    def to_kernel(self, mask: np.ndarray) -> np.ndarray:
        """A mask of the function output as a mask of the kernel output."""
        found = np.zeros(int(np.prod(self.kernel_shape)), bool)
        found[self.ids[mask & (self.ids >= 0)]] = True
        return found.reshape(self.kernel_shape)

    def to_output(self, values: np.ndarray, fill: Any) -> np.ndarray:
        """Per kernel output element values, at the function output's elements."""
        flat = np.asarray(values).reshape(-1)
        return np.where(self.ids >= 0, flat[np.maximum(self.ids, 0)], fill)


@dataclasses.dataclass(frozen=True)
class Untraced:
    """A function output made from kernel outputs that cannot be traced element by element."""

    reason: str  # "`reduce_sum` combines several elements of the kernel's outputs[0]"


@dataclasses.dataclass(frozen=True)
class Ids:
    ids: np.ndarray  # global element ids (see `_Numbering`), -1 for none
    through: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class _Stopped:
    reason: str


def trace_elements(closed_jaxpr: Any, flat_args: Sequence[Any], kernels: Sequence[Kernel],
                   wanted: Sequence[int]) -> dict[int, ElementTrace | Untraced | None]:
    """For the function outputs `wanted`: where their elements came from (None: no kernel
    output reaches it)."""
    numbering = _Numbering(kernels)

    def eval_eqn(eqn: Any, ins: list[Any]) -> list[Any]:
        return _evaluate(eqn, ins, numbering)

    outs = interpret_jaxpr(closed_jaxpr, list(flat_args), eval_eqn)
    return {i: _result(outs[i], numbering, kernels) for i in wanted}


class _Numbering:
    """Kernel outputs numbered one after another, so that ids say which output too."""

    def __init__(self, kernels: Sequence[Kernel]) -> None:
        self.index = {id(k.handle.eqn): k.index for k in kernels if k.handle is not None}
        self.starts: list[tuple[int, int, int, tuple[int, ...]]] = []  # start, kernel, out
        self.next = 0

    def ids_of(self, eqn: Any) -> list[Any]:
        k = self.index.get(id(eqn))
        found: list[Any] = []
        for j, v in enumerate(eqn.outvars):
            shape = tuple(int(d) for d in v.aval.shape)
            size = int(np.prod(shape))
            if k is None:
                found.append(_Stopped(f"an uncaptured kernel `{eqn.primitive.name}`"))
                continue
            self.starts.append((self.next, k, j, shape))
            ids = np.arange(self.next, self.next + size, dtype=np.int32).reshape(shape)
            found.append(Ids(ids, ()))
            self.next += size
        return found

    def source(self, ids: np.ndarray) -> tuple[int, int, int, tuple[int, ...]] | None:
        """The one kernel output all (mapped) ids fall in."""
        mapped = ids[ids >= 0]
        if not mapped.size:
            return None
        return numbered_source(self.starts, mapped)


def numbered_source(starts: Sequence[tuple[int, int, int, tuple[int, ...]]], mapped: np.ndarray
                    ) -> tuple[int, int, int, tuple[int, ...]] | None:
    """The one numbered array (start, ..., shape) all of `mapped` (ids >= 0) fall in."""
    lo, hi = int(mapped.min()), int(mapped.max())
    for start, k, j, shape in starts:
        if start <= lo and hi < start + int(np.prod(shape)):
            return start, k, j, shape
    return None


def _evaluate(eqn: Any, ins: list[Any], numbering: _Numbering) -> list[Any]:
    if eqn.primitive in KERNEL_PRIMITIVES:
        return numbering.ids_of(eqn)
    return follow_ids(eqn, ins)


def follow_ids(eqn: Any, ins: list[Any]) -> list[Any]:
    """One equation that is not a kernel, on ids where its operands carry them."""
    name = eqn.primitive.name
    n_out = len(eqn.outvars)
    stopped = next((x for x in ins if isinstance(x, _Stopped)), None)
    if stopped is not None:
        return [stopped] * n_out
    tracked = [n for n, x in enumerate(ins) if isinstance(x, Ids)]
    if contains_kernel(eqn.params):  # a kernel inside a loop or branch: never run here
        return [_Stopped(f"the kernel runs inside `{name}`")] * n_out
    if not tracked:
        return bind_eqn(eqn, ins, eqn.params)
    if name in _MOVES:
        return _moved(eqn, ins, tracked)
    if name in _ELEMENTWISE:
        return [_elementwise(eqn, ins, tracked)] * n_out
    return [_Stopped(f"`{name}` combines several elements of the kernel's output")] * n_out


def _moved(eqn: Any, ins: list[Any], tracked: list[int]) -> list[Any]:
    """Bind the equation on the ids: data operands not from a kernel count as unmapped."""
    name = eqn.primitive.name
    not_data = _MOVES[name]
    if any(n in not_data for n in tracked):
        return [_Stopped(f"`{name}` picks elements by the kernel's values")] * len(eqn.outvars)
    through = next(ins[n].through for n in tracked)
    operands = [jnp.asarray(x.ids) if isinstance(x, Ids) else
                x if n in not_data or _is_index(eqn, n) else
                jnp.full(np.shape(x), _UNMAPPED, jnp.int32)
                for n, x in enumerate(ins)]
    outs = bind_eqn(eqn, operands, eqn.params)
    return [Ids(np.asarray(o), (*through, name)) for o in outs]


def _is_index(eqn: Any, n: int) -> bool:
    """Start indices of a dynamic slice or update: everything after the data operands."""
    name = eqn.primitive.name
    return (name == "dynamic_slice" and n >= 1) or (name == "dynamic_update_slice" and n >= 2)


def _elementwise(eqn: Any, ins: list[Any], tracked: list[int]) -> Any:
    """Each element keeps its id, unless two kernel elements meet in one (`x + x.T`)."""
    shape = tuple(int(d) for d in eqn.outvars[0].aval.shape)
    ids = [np.broadcast_to(ins[n].ids, shape) for n in tracked]
    first = ids[0]
    if any(not np.array_equal(first, other) for other in ids[1:]):
        return _Stopped(f"`{eqn.primitive.name}` combines different elements of the kernel's "
                        "outputs")
    through = ins[tracked[0]].through
    if eqn.primitive.name != "convert_element_type" or not through or through[-1] != "cast":
        through = (*through, "cast" if eqn.primitive.name == "convert_element_type"
                   else eqn.primitive.name)
    return Ids(np.array(first), through)


def _result(value: Any, numbering: _Numbering, kernels: Sequence[Kernel]
            ) -> ElementTrace | Untraced | None:
    if isinstance(value, _Stopped):
        return Untraced(value.reason)
    if not isinstance(value, Ids):
        return None
    src = numbering.source(value.ids)
    if src is None:
        return None if not (value.ids >= 0).any() else Untraced(
            "its elements come from the outputs of several kernels")
    start, k, j, shape = src
    ids = np.where(value.ids >= 0, value.ids - start, _UNMAPPED).astype(np.int64)
    return ElementTrace(k, j, shape, ids, value.through)

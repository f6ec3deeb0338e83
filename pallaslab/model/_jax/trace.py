"""Tracing a function, walking its jaxpr for kernels, and evaluating it equation by equation."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core

from pallaslab.errors import IndexMapError, X64Error
from pallaslab.model._jax.base import (
    _CALL_ONCE,
    _CONTEXT_NAMES,
    KERNEL_PRIMITIVES,
    PALLAS_CALL,
    CaptureHandle,
    Jaxpr,
)

# --------------------------------------------------------------------------------------------
# Tracing


_INDEX_MAP_ARITY = re.compile(
    r"Index map function (?P<fn>.+?) for (?P<origin>\S+) must return (?P<want>\d+) values "
    r"to match block_shape=(?P<bs>\(.*?\))\. Currently returning (?P<got>\d+) values"
)
_INDEX_MAP_DTYPE = re.compile(
    r"Index map function (?P<fn>.+?) for (?P<origin>\S+) must return integer scalars\. "
    r"Output\[(?P<i>\d+)\] has type (?P<type>\S+?)\.?$"
)


def trace(fn: Callable, args: Sequence[Any], kwargs: Mapping[str, Any]) -> CaptureHandle:
    """Trace `fn(*args, **kwargs)` to a jaxpr without running it.

    Pallas's own BlockSpec validation errors become `IndexMapError`s; any other exception
    (the user's own) propagates unchanged.
    """
    try:
        closed = jax.make_jaxpr(fn)(*args, **kwargs)
    except ValueError as err:
        translated = _translate_index_map_error(str(err)) or _x64_error(str(err))
        if translated is None:
            raise
        raise translated from err
    except TypeError as err:
        arity = _index_map_parameter_error(err)
        if arity is None:
            raise
        raise arity from None
    flat_args = tuple(jax.tree.leaves((tuple(args), dict(kwargs))))
    return CaptureHandle(closed, flat_args)


def _translate_index_map_error(message: str) -> IndexMapError | None:
    first = message.splitlines()[0] if message else ""
    if m := _INDEX_MAP_ARITY.search(first):
        return IndexMapError(
            f"{m['origin']}: the index map {m['fn']} returns {m['got']} block indices, but "
            f"its block_shape {_short_block_shape(m['bs'])} has {m['want']} dimensions. "
            "Rule: an index map returns exactly one block index per block dimension "
            "(including squeezed `None` dimensions)."
        )
    if m := _INDEX_MAP_DTYPE.search(first):
        return IndexMapError(
            f"{m['origin']}: the index map {m['fn']} returns a non-integer block index: "
            f"output {m['i']} has type {m['type']}. Rule: block indices must be integer "
            "scalars (use `//` or `jnp.int32(...)`, not `/`)."
        )
    return None


_WIDE = re.compile(r"\b(float64|int64|uint64|complex128)\b")


def _x64_error(message: str) -> X64Error | None:
    """A 64-bit dtype refused because JAX's 64-bit mode is off: say how to turn it on."""
    if jax.config.jax_enable_x64 or not (m := _WIDE.search(message)):
        return None
    first = message.strip().splitlines()[0]
    return X64Error(
        f"a kernel uses {m[1]}, but JAX's 64-bit types are off (jax_enable_x64 is False), so "
        f"JAX computes in 32 bits and the kernel's refs and values disagree: {first} Enable "
        "them with jax.config.update('jax_enable_x64', True) before creating arrays, or use "
        "32-bit dtypes.")


def _index_map_parameter_error(err: TypeError) -> IndexMapError | None:
    """An index map called with the wrong number of arguments, told as the rule it breaks
    (Pallas calls it while converting a BlockSpec; its frame knows the operand and grid)."""
    if "positional argument" not in str(err):
        return None
    tb = err.__traceback__
    frame_locals = None
    while tb is not None:
        frame_code = tb.tb_frame.f_code
        if frame_code.co_name == "to_block_mapping" and "pallas" in frame_code.co_filename:
            frame_locals = tb.tb_frame.f_locals
        tb = tb.tb_next
    if frame_locals is None or "index_map_func" not in frame_locals:
        return None
    spec = frame_locals.get("self")
    func = getattr(spec, "index_map", None) or frame_locals["index_map_func"]
    func = inspect.unwrap(func)  # Pallas wraps it (twice) for equality checks
    grid = tuple(frame_locals.get("grid") or ())
    given = len(frame_locals.get("index_map_avals") or ())
    code = getattr(func, "__code__", None)
    where = (f" ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})"
             if code is not None else "")
    takes = code.co_argcount if code is not None else "a different number of"
    prefetch = given - len(grid)
    return IndexMapError(
        f"{frame_locals.get('origin', 'an operand')}: the index map "
        f"{getattr(func, '__name__', 'function')}{where} takes {takes} parameter(s), but "
        f"Pallas calls it with {given}: one per grid dimension (grid {grid}) plus one per "
        f"scalar-prefetch operand ({prefetch}). Rule: an index map takes the program ids, "
        f"then the scalar-prefetch refs. ({err})")


def _short_block_shape(text: str) -> str:
    """'(Blocked(block_size=8), Squeezed())' -> '(8, None)'."""
    parts = re.findall(r"Blocked\(block_size=(\d+)\)|(Squeezed\(\))|Element\((\d+)", text)
    if not parts:
        return text
    dims = [b or e or "None" for b, sq, e in parts]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


# --------------------------------------------------------------------------------------------
# Walking the jaxpr


@dataclasses.dataclass(frozen=True)
class FoundKernel:
    eqn: Any
    context: tuple[str, ...]


def find_kernels(closed_jaxpr: Jaxpr) -> list[FoundKernel]:
    """Every kernel equation in launch order, descending into every sub-jaxpr."""
    return list(_walk(closed_jaxpr, ()))


def _walk(jaxpr: Jaxpr, context: tuple[str, ...]) -> Iterator[FoundKernel]:
    for eqn in jaxpr.eqns:
        if eqn.primitive in KERNEL_PRIMITIVES:
            yield FoundKernel(eqn, context)
            continue
        subs = list(_sub_jaxprs(eqn.params))
        for i, sub in enumerate(subs):
            label = _context_label(eqn, i, len(subs))
            yield from _walk(sub, (*context, label) if label else context)


def _sub_jaxprs(params: Mapping[str, Any]) -> Iterator[Jaxpr]:
    for value in params.values():
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, Jaxpr):
                yield v


def _context_label(eqn: Any, i: int, n: int) -> str:
    name = eqn.primitive.name
    label = _CONTEXT_NAMES.get(name, name)
    if name == "scan":
        return f"scan[length={eqn.params.get('length')}]"
    if name == "cond":
        return f"cond[branch {i}]"
    if name == "while":
        return "while[cond]" if i == 0 and n > 1 else "while"
    return label


# --------------------------------------------------------------------------------------------
# Concrete values of dynamic grid bounds and scalar-prefetch operands


def concrete_kernel_operands(
    closed_jaxpr: Jaxpr, flat_args: Sequence[Any], wanted: set[int]
) -> dict[int, list[np.ndarray]]:
    """Evaluate, with concrete arguments, the leading operands of the wanted kernel equations.

    Kernels are not run: their outputs are replaced by zeros, so a kernel whose grid or
    scalar-prefetch values depend on an earlier kernel's output gets no values (it stays
    dynamic). Kernels inside loops or conditionals are not evaluated either.
    """
    found: dict[int, list[np.ndarray]] = {}
    tainted: dict[int, Any] = {}  # id -> value derived from a kernel output (kept alive)

    def eval_eqn(eqn: Any, ins: list[Any]) -> list[Any]:
        is_tainted = any(id(x) in tainted for x in ins)
        if eqn.primitive in KERNEL_PRIMITIVES or _contains_kernel(eqn.params):
            if id(eqn) in wanted and not is_tainted:
                found[id(eqn)] = [np.asarray(x) for x in ins[: _leading_operand_count(eqn)]]
            outs, is_tainted = _zeros_like_outputs(eqn), True
        else:
            outs = _bind(eqn, ins, eqn.params)
        if is_tainted:
            tainted.update((id(x), x) for x in outs)
        return outs

    with jax.default_device(jax.devices("cpu")[0]):
        interpret_jaxpr(closed_jaxpr, flat_args, eval_eqn)
    return found


def interpret_jaxpr(
    jaxpr: Jaxpr, args: Sequence[Any], eval_eqn: Callable[[Any, list[Any]], list[Any]]
) -> list[Any]:
    """Evaluate a closed jaxpr equation by equation, descending into calls made exactly once
    (jit, custom_vjp, ...) and handing every other equation to `eval_eqn(eqn, inputs)`."""
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, jaxpr.consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))

    def read(a: Any) -> Any:
        return a.val if isinstance(a, jax_core.Literal) else env[a]

    for eqn in jaxpr.eqns:
        ins = [read(a) for a in eqn.invars]
        sub = _single_sub(eqn.params) if eqn.primitive.name in _CALL_ONCE else None
        outs = interpret_jaxpr(sub, ins, eval_eqn) if sub is not None else eval_eqn(eqn, ins)
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(a) for a in jaxpr.outvars]


def _is_literal(a: Any) -> bool:
    return isinstance(a, jax_core.Literal)


def _bind(eqn: Any, ins: list[Any], params: Mapping[str, Any]) -> list[Any]:
    ans = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(params))
    return list(ans) if eqn.primitive.multiple_results else [ans]


def _zeros_like_outputs(eqn: Any) -> list[Any]:
    """Stand-ins for outputs we do not compute (kernels are never run during capture)."""
    avals: list[Any] = [v.aval for v in eqn.outvars]
    return [jnp.zeros(a.shape, a.dtype) for a in avals]


def _single_sub(params: Mapping[str, Any]) -> Jaxpr | None:
    subs = list(_sub_jaxprs(params))
    return subs[0] if len(subs) == 1 else None


def _contains_kernel(params: Mapping[str, Any]) -> bool:
    return any(find_kernels(sub) for sub in _sub_jaxprs(params))


def _leading_operand_count(eqn: Any) -> int:
    if eqn.primitive is not PALLAS_CALL:
        return 0
    gm = eqn.params["grid_mapping"]
    return gm.num_dynamic_grid_bounds + gm.num_index_operands


def needs_concrete_values(eqn: Any) -> bool:
    return _leading_operand_count(eqn) > 0

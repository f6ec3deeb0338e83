"""What `jax.experimental.pallas.fuser` fused into a kernel.

`fuser.fuse` traces the user's function, cuts it at the `fusible` call and hands the producers
of its inputs (and the consumers of its outputs) to the fusible as `Fusion`s; the fusible pulls
them into its kernel with `pull_block_spec`, whose evaluator (`block_spec.make_kernel_function`)
re-binds each producer equation on blocks inside the kernel body. So, in the captured kernel
jaxpr, a fused-in equation is one bound from inside the fuser package's own code while the
kernel body was being traced: its traceback reaches a frame of `jax/_src/pallas/fuser/` before
it reaches the user's kernel body. That evaluator drops the producer's own source info (a TODO
in JAX), so the user's lines of the fused expression (`jnp.exp(x) + b`) are read from a second
trace with nested fusion switched off (`fuser_sources`), where the producers and consumers still
sit around the `fusible` equation with the user's source info and argument names.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
from jax._src import core as jax_core
from jax._src import source_info_util
from jax._src.pallas.fuser import jaxpr_fusion
from jax._src.pallas.fuser.fusible import Fusible

from pallaslab.model.kernel import FusedFunction, Fusion, Kernel, Operand

_JAX_DIR = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
_FUSER_DIR = os.path.join(_JAX_DIR, "_src", "pallas", "fuser") + os.sep
# Reading a ref or a grid position is the kernel's own plumbing, not a computed value.
_PLUMBING = frozenset({"get", "program_id", "num_programs"})

# --------------------------------------------------------------------------------------------
# The captured kernel jaxpr: which equations the fuser bound, grouped into functions


def kernel_fusion(kernel_jaxpr: Any, operands: Sequence[Operand]) -> Fusion | None:
    """The prologue/epilogue functions the fuser pulled into a kernel body, or None.

    `operands` are the kernel's operands in Pallas's order, which is the body's parameter
    order (scalar prefetch, inputs, outputs, scratch).
    """
    jaxpr = getattr(kernel_jaxpr, "jaxpr", kernel_jaxpr)
    refs = {v: op for v, op in zip(jaxpr.invars, operands, strict=False)}
    functions = tuple(_scope_functions(jaxpr, refs))
    if not functions:
        return None
    return Fusion(functions=functions)


def _scope_functions(jaxpr: Any, refs: Mapping[Any, Operand]) -> Iterator[FusedFunction]:
    fused = [e for e in jaxpr.eqns if _bound_by_fuser(e)]
    if fused:
        yield from (_function(jaxpr, group, refs) for group in _components(fused))
    for eqn in jaxpr.eqns:  # fused code under `pl.when` / loops lives in sub-jaxprs
        for sub in _sub_jaxprs(eqn):
            offset = len(eqn.invars) - len(sub.invars)
            inner = {sv: refs[v] for sv, v in zip(sub.invars, eqn.invars[max(offset, 0):],
                                                  strict=False)
                     if isinstance(v, jax_core.Var) and v in refs}
            yield from _scope_functions(sub, inner)


def _bound_by_fuser(eqn: Any) -> bool:
    """True when the equation was bound by the fuser's evaluator, inside the kernel body: a
    fuser frame comes before (inside) the first frame outside JAX."""
    tb = eqn.source_info.traceback
    if tb is None:
        return False
    for frame in tb.frames:  # innermost first
        if frame.file_name.startswith(_FUSER_DIR):
            return True
        if not frame.file_name.startswith(_JAX_DIR):
            return False
    return False


def _components(fused: list[Any]) -> list[list[Any]]:
    """Fused equations grouped by data flow: one group per fused function application."""
    producer = {id(v): i for i, e in enumerate(fused) for v in e.outvars}
    parent = list(range(len(fused)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, eqn in enumerate(fused):
        for v in eqn.invars:
            j = producer.get(id(v))
            if j is not None:
                parent[find(i)] = find(j)
    groups: dict[int, list[Any]] = {}
    for i, eqn in enumerate(fused):
        groups.setdefault(find(i), []).append(eqn)
    return list(groups.values())


def _function(jaxpr: Any, group: list[Any], refs: Mapping[Any, Operand]) -> FusedFunction:
    inside = {id(v) for e in group for v in e.outvars}
    producers = {id(v): e for e in jaxpr.eqns for v in e.outvars}
    invars: list[Any] = []
    for eqn in group:
        for v in eqn.invars:
            if isinstance(v, jax_core.Var) and id(v) not in inside and v not in invars:
                invars.append(v)
    group_ids = {id(e) for e in group}
    used_outside = {id(v) for e in jaxpr.eqns if id(e) not in group_ids for v in e.invars
                    if isinstance(v, jax_core.Var)} | {id(v) for v in jaxpr.outvars}
    outvars = [v for e in group for v in e.outvars if id(v) in used_outside]
    loaded = [_loaded_ref(producers.get(id(v)), refs) for v in invars]
    computed = any(op is None and _is_computed(producers.get(id(v)), v)
                   for op, v in zip(loaded, invars, strict=True))
    if computed:
        role, operand = "epilogue", _written_ref(jaxpr, outvars, refs)
    else:
        role, operand = "prologue", _common_origin([op.origin for op in loaded if op])
    info = jaxpr.debug_info.with_unknown_names()  # the kernel's: no names of its own
    text = str(jax_core.Jaxpr([], invars, outvars, group, debug_info=info))
    return FusedFunction(role=role, operand=operand, jaxpr=text,  # type: ignore[arg-type]
                         sources=_user_lines(group))


def _loaded_ref(producer: Any, refs: Mapping[Any, Operand]) -> Operand | None:
    if producer is None or producer.primitive.name != "get":
        return None
    return refs.get(producer.invars[0])


def _is_computed(producer: Any, var: Any) -> bool:
    if producer is None:  # a parameter of a sub-jaxpr: a value handed in by the kernel
        return bool(getattr(var.aval, "shape", ()))
    return producer.primitive.name not in _PLUMBING


def _written_ref(jaxpr: Any, outvars: list[Any], refs: Mapping[Any, Operand]) -> str:
    ids = {id(v) for v in outvars}
    origins = [refs[e.invars[0]].origin for e in jaxpr.eqns
               if e.primitive.name == "swap" and len(e.invars) > 1
               and id(e.invars[1]) in ids and e.invars[0] in refs]
    return _common_origin(origins) if origins else "outputs"


def _common_origin(origins: list[str]) -> str:
    """The pytree prefix the origins share ("args[0][0]", "args[0][1]" -> "args[0]")."""
    if not origins:
        return "-"
    if len(set(origins)) == 1:
        return origins[0]
    parts = [o.replace("]", "]\0").split("\0") for o in origins]
    common: list[str] = []
    for pieces in zip(*parts, strict=False):
        if len(set(pieces)) != 1:
            break
        common.append(pieces[0])
    return "".join(common) or ", ".join(dict.fromkeys(origins))


def _user_lines(eqns: Sequence[Any]) -> tuple[str, ...]:
    lines: dict[str, None] = {}
    for eqn in eqns:
        frame = source_info_util.user_frame(eqn.source_info.traceback)
        if frame is not None:
            lines[f"{frame.file_name}:{frame.start_line}"] = None
    return tuple(lines)


def _sub_jaxprs(eqn: Any) -> Iterator[Any]:
    for value in eqn.params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            sub = getattr(v, "jaxpr", v)
            if isinstance(sub, jax_core.Jaxpr):
                yield sub


# --------------------------------------------------------------------------------------------
# The user's side: a trace with nested fusion off keeps the producers' lines and names


@dataclasses.dataclass(frozen=True)
class _UserFunction:
    """A producer (prologue) or consumer (epilogue) of a `fusible` call, in the user's code."""

    lines: tuple[str, ...]
    primitives: tuple[str, ...]  # sorted: what the kernel side must have re-bound
    names: tuple[str, ...] = ()  # the arrays it reads (prologues), as the kernel gets them


@dataclasses.dataclass(frozen=True)
class _FusibleCall:
    prologues: tuple[_UserFunction, ...]
    epilogues: tuple[_UserFunction, ...]


def fuser_sources(fn: Callable[..., Any] | None, args: Sequence[Any],
                  kwargs: Mapping[str, Any], kernels: Sequence[Kernel],
                  chip: str | None = None) -> tuple[Kernel, ...]:
    """`kernels` with their fused functions linked to the user's lines and each fused
    operand to the user's array it reads (`Fusion.operand_arrays`).

    Traces `fn` again with `fuser.fuse` switched off (JAX's own `disable_nested_fuse`, which
    `fuse` uses for the same purpose), so each `fusible` call appears as one equation with the
    user's producers before it and consumers after it. Fusible calls that fuse something and
    fused kernels are matched in launch order; within one, each kernel-side function takes
    the user's function with the same primitives, else the next one in order.
    """
    if fn is None or not any(k.fusion for k in kernels):
        return tuple(kernels)
    from pallaslab.model._jax.trace import abstract_tpu  # trace imports kernels -> fusion

    # Under the chip the capture was traced for, if any: the fuser's trace asks the same.
    with jaxpr_fusion.disable_nested_fuse(True), abstract_tpu(chip):
        closed = jax.make_jaxpr(fn)(*args, **kwargs)
    calls = iter(c for c in _fusible_calls(closed.jaxpr) if c.prologues or c.epilogues)
    out = []
    for kernel in kernels:
        call = next(calls, None) if kernel.fusion else None
        out.append(_linked(kernel, call) if call is not None else kernel)
    return tuple(out)


def _linked(kernel: Kernel, call: _FusibleCall) -> Kernel:
    assert kernel.fusion is not None
    left = {"prologue": list(call.prologues), "epilogue": list(call.epilogues)}
    functions, arrays = [], dict(kernel.fusion.operand_arrays)
    for f in kernel.fusion.functions:
        user = _take(left[f.role], tuple(sorted(_PRIMITIVE.findall(f.jaxpr))))
        if user is not None:
            f = dataclasses.replace(f, sources=user.lines or f.sources)
            leaves = [op.origin for op in kernel.inputs
                      if op.origin == f.operand or op.origin.startswith(f.operand + "[")]
            if f.role == "prologue":
                arrays.update(zip(leaves, user.names, strict=False))
        functions.append(f)
    return dataclasses.replace(
        kernel, fusion=Fusion(functions=tuple(functions), operand_arrays=arrays))


_PRIMITIVE = re.compile(r"= ([a-z_]\w*)")


def _take(candidates: list[_UserFunction], primitives: tuple[str, ...]) -> _UserFunction | None:
    same = [c for c in candidates if c.primitives == primitives]
    pick = same[0] if same else (candidates[0] if candidates else None)
    if pick is not None:
        candidates.remove(pick)
    return pick


def _fusible_calls(jaxpr: Any) -> Iterator[_FusibleCall]:
    for i, eqn in enumerate(jaxpr.eqns):
        prim = eqn.params.get("_prim")
        if isinstance(prim, Fusible):
            yield _fusible_call(jaxpr, i, prim)
            continue
        for sub in _sub_jaxprs(eqn):
            yield from _fusible_calls(sub)


def _fusible_call(jaxpr: Any, index: int, prim: Fusible) -> _FusibleCall:
    eqn = jaxpr.eqns[index]
    before, after = jaxpr.eqns[:index], jaxpr.eqns[index + 1:]
    prologues = []
    for var in eqn.invars[prim.num_consts:]:
        producers = _backward(before, [var])
        if producers:  # else the fusible reads this argument as is: nothing fused
            prologues.append(_UserFunction(_user_lines(producers), _primitives(producers),
                                           _free_names(producers, jaxpr)))
    consumers = _forward(after, eqn.outvars)
    epilogues = ((_UserFunction(_user_lines(consumers), _primitives(consumers)),)
                 if consumers else ())
    return _FusibleCall(tuple(prologues), epilogues)


def _primitives(eqns: Sequence[Any]) -> tuple[str, ...]:
    return tuple(sorted(e.primitive.name for e in eqns))


def _arg_names(jaxpr: Any) -> dict[Any, str]:
    names = getattr(jaxpr.debug_info, "arg_names", None) or ()
    return {v: str(n) for v, n in zip(jaxpr.invars, names, strict=False) if n}


def _backward(eqns: Sequence[Any], wanted: Sequence[Any]) -> list[Any]:
    need = {id(v) for v in wanted if isinstance(v, jax_core.Var)}
    picked = []
    for eqn in reversed(eqns):
        if any(id(v) in need for v in eqn.outvars):
            picked.append(eqn)
            need |= {id(v) for v in eqn.invars if isinstance(v, jax_core.Var)}
    return picked[::-1]


def _forward(eqns: Sequence[Any], sources: Sequence[Any]) -> list[Any]:
    have = {id(v) for v in sources}
    picked = []
    for eqn in eqns:
        if any(isinstance(v, jax_core.Var) and id(v) in have for v in eqn.invars):
            picked.append(eqn)
            have |= {id(v) for v in eqn.outvars}
    return picked


def _free_names(eqns: Sequence[Any], jaxpr: Any) -> tuple[str, ...]:
    """The arrays the producers read, in the order `get_fusion_values` hands them to the
    kernel (constants, then the traced function's arguments): their argument names."""
    made = {id(v) for e in eqns for v in e.outvars}
    read = {id(v) for e in eqns for v in e.invars if isinstance(v, jax_core.Var)} - made
    names = _arg_names(jaxpr)
    return tuple(names.get(v, "const") for v in (*jaxpr.constvars, *jaxpr.invars)
                 if id(v) in read)

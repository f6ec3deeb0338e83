"""What a TPU kernel body does beyond its BlockSpecs: nested `emit_pipeline`s, `run_scoped`
buffers, manual DMAs and semaphore operations, read off the kernel's jaxpr.

The body is walked with every ref named by its origin in the enclosing kernel ("args[0]",
"outputs", "scratch[1]", "scoped[0]"), so a DMA or an inner pipeline says which of the kernel's
refs it reads and writes. Pipelines come from a trace with JAX's `emit_pipeline` primitive
(`CaptureHandle.structure_jaxpr`): there its grid mapping is intact, where the plain trace has
inlined it into loops of DMAs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax._src import core as jax_core
from jax._src.pallas import core as pallas_core
from jax._src.state import types as state_types

from pallaslab.model._jax.base import KernelHandle
from pallaslab.model._jax.equation_fields import (
    block_operand,
    call_site_of,
    element_type,
    is_numpy_dtype,
    memory_space_of,
    semantics_name,
)
from pallaslab.model._jax.index_maps import index_map_evaluator
from pallaslab.model._jax.nested_outer import outer_closure
from pallaslab.model._jax.pipeline_body import pipeline_body
from pallaslab.model._jax.trace import all_sub_jaxprs
from pallaslab.model.kernel import DmaCopy, Kernel, Operand, SemaphoreOp
from pallaslab.model.source_names import short_source

# Loops: what they run, runs once per iteration.
_LOOPS = frozenset({"scan", "while"})
_SEMAPHORE_OPS = {"semaphore_signal": "signal", "semaphore_wait": "wait",
                  "semaphore_read": "read"}
_TMA_COPIES = ("copy_gmem_to_smem", "copy_smem_to_gmem")  # Mosaic GPU
_BARRIER_OPS = {"barrier_wait": "barrier_wait", "barrier_arrive": "barrier_arrive"}


@dataclasses.dataclass(frozen=True)
class Nested:
    pipelines: tuple[Kernel, ...]
    scoped: tuple[Operand, ...]
    dmas: tuple[DmaCopy, ...]
    semaphore_ops: tuple[SemaphoreOp, ...]
    # Equations the walk could not describe (what, where, the error): the rest stands.
    notes: tuple[str, ...] = ()


@dataclasses.dataclass
class _Walk:
    """The walk's accumulators; `origin` names every ref variable met so far."""

    origin: dict[Any, str]
    pipelines: list[Kernel] = dataclasses.field(default_factory=list)
    scoped: list[Operand] = dataclasses.field(default_factory=list)
    dmas: list[DmaCopy] = dataclasses.field(default_factory=list)
    semaphore_ops: list[SemaphoreOp] = dataclasses.field(default_factory=list)
    defs: dict[Any, Any] = dataclasses.field(default_factory=dict)  # value -> its equation
    # A sub-jaxpr's parameter -> the outer value it always equals (never a loop's carry).
    aliases: dict[Any, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    # The `run_scoped` regions open at the equation walked (ids, outermost first), and how
    # many the walk has opened.
    regions: list[int] = dataclasses.field(default_factory=list)
    opened: int = 0


def nested_structure(kernel: Kernel, body: Any) -> Nested:
    """The nested structure of `kernel` whose body jaxpr (open) is `body`: its invars are the
    kernel's operands in order."""
    walk = _Walk(origin={v: op.origin for v, op in zip(body.invars, kernel.operands,
                                                          strict=False)})
    _walk_jaxpr(body, walk, repeated=False, kernel=kernel)
    return Nested(tuple(walk.pipelines), tuple(walk.scoped), tuple(walk.dmas),
                  tuple(walk.semaphore_ops), tuple(walk.notes))


def _walk_jaxpr(jaxpr: Any, walk: _Walk, *, repeated: bool, kernel: Kernel) -> None:
    walk.defs.update({v: eqn for eqn in jaxpr.eqns for v in eqn.outvars})
    for eqn in jaxpr.eqns:
        try:
            _visit(eqn, walk, repeated, kernel)
        except Exception as err:  # one structure we cannot read must not lose the capture
            walk.notes.append(
                f"{eqn.primitive.name} at {call_site_of(eqn) or 'an unknown line'} "
                "is not described "
                f"(reading it failed: {type(err).__name__}: {str(err)[:200]})")


def _visit(eqn: Any, walk: _Walk, repeated: bool, kernel: Kernel) -> None:
    """Record what one equation of the body does (descending into its sub-jaxprs)."""
    name = eqn.primitive.name
    if name == "emit_pipeline":
        walk.pipelines.append(_pipeline(eqn, walk, kernel, len(walk.pipelines)))
        _pipeline_body(eqn, walk, kernel)
    elif name == "dma_start":
        walk.dmas.append(_dma(eqn, walk, repeated, "async"))
    elif name == "dma_wait":
        sem = _dma_refs(eqn)[2]
        if sem is not None:
            walk.semaphore_ops.append(SemaphoreOp("dma_wait", _name(sem, walk),
                                                  call_site_of(eqn)))
    elif name in _SEMAPHORE_OPS:
        walk.semaphore_ops.append(_semaphore_op(eqn, walk))
    elif name in _TMA_COPIES:
        walk.dmas.append(_tma_copy(eqn, walk, repeated))
    elif name in _BARRIER_OPS:
        walk.semaphore_ops.append(SemaphoreOp(
            _BARRIER_OPS[name], _name(eqn.invars[0], walk), call_site_of(eqn)))  # type: ignore[arg-type]
    elif name == "run_scoped":
        _run_scoped(eqn, walk, repeated, kernel)
    elif name == "get_global":  # one semaphore (array) of the launch, shared by all blocks
        site = call_site_of(eqn)
        walk.origin[eqn.outvars[0]] = (f"global semaphore at {short_source(site)}" if site
                                       else "global semaphore")
    else:
        _descend(eqn, walk, repeated, kernel)


def _descend(eqn: Any, walk: _Walk, repeated: bool, kernel: Kernel) -> None:
    """Into control flow and calls, mapping each sub-jaxpr's parameters to the operands."""
    name = eqn.primitive.name
    params = eqn.params
    inner_repeated = repeated or (name in _LOOPS and params.get("length", 2) != 1)
    if name == "cond":
        subs = [(b.jaxpr, eqn.invars[1:]) for b in params["branches"]]
    elif name == "while":
        nc, nb = params["cond_nconsts"], params["body_nconsts"]
        carry = eqn.invars[nc + nb:]
        subs = [(params["body_jaxpr"].jaxpr, [*eqn.invars[nc:nc + nb], *carry])]
    else:
        subs = [(sub, eqn.invars) for sub in all_sub_jaxprs(params)]
    for sub, outer in subs:
        if len(sub.invars) == len(outer):
            _bind(walk, sub.invars, outer)
            fixed = _loop_invariant(eqn, len(outer))
            walk.aliases.update((iv, ov) for iv, ov in zip(sub.invars[:fixed], outer[:fixed],
                                                            strict=False)
                                if isinstance(ov, (jax_core.Var, jax_core.Literal)))
        _walk_jaxpr(sub, walk, repeated=inner_repeated, kernel=kernel)


def _pipeline_body(eqn: Any, walk: _Walk, kernel: Kernel) -> None:
    """DMAs, semaphores and scoped buffers inside an emit_pipeline's body belong to the
    kernel, once per inner step: its block refs are named "window of <the kernel ref>", the
    refs it closes over by their own names."""
    params = eqn.params
    body = params["body_jaxpr"]
    args = params["args_tree"].unflatten(eqn.invars)
    refs = params["refs_tree"].unflatten(list(args.refs_flat))
    flat_refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
    constvars = list(getattr(body, "constvars", ()))
    _bind(walk, constvars, list(args.body_consts))
    blocks = body.invars[-len(flat_refs):] if flat_refs else []
    for block, ref in zip(blocks, flat_refs, strict=False):
        if isinstance(ref, jax_core.Var) and ref in walk.origin:
            walk.origin[block] = f"window of {walk.origin[ref]}"
    _walk_jaxpr(body, walk, repeated=True, kernel=kernel)


def _loop_invariant(eqn: Any, n: int) -> int:
    """How many leading parameters of `eqn`'s sub-jaxpr equal its operands on every run: a
    scan's or while's consts only (its carry changes), all of any other call's."""
    name = eqn.primitive.name
    if name == "scan":  # its operands are grouped (consts, carry, xs) by `ft_in`
        try:
            consts = eqn.params["ft_in"].update(list(range(n))).unpack()[0]
        except Exception:  # another scan signature: alias nothing
            return 0
        return len(list(consts))
    if name == "while":
        return int(eqn.params["body_nconsts"])
    return n


def _run_scoped(eqn: Any, walk: _Walk, repeated: bool, kernel: Kernel) -> None:
    """`run_scoped`: its jaxpr's parameters are the new buffers, its constvars the refs it
    closes over. `sync_copy` is a run_scoped DMA semaphore around one start and wait: a sync
    DMA, not a buffer of the user's."""
    jaxpr = eqn.params["jaxpr"]
    _bind(walk, jaxpr.constvars, eqn.invars)
    if _is_sync_copy(jaxpr):  # the user's line is sync_copy's, on the run_scoped equation
        dma = _dma(jaxpr.eqns[0], walk, repeated, "sync")
        walk.dmas.append(dataclasses.replace(dma, source=dma.source or call_site_of(eqn)))
        return
    names = getattr(jaxpr.debug_info, "arg_names", None) or ()
    walk.regions.append(walk.opened)
    walk.opened += 1
    scope = tuple(walk.regions)
    for i, v in enumerate(jaxpr.invars):
        origin = f"scoped[{len(walk.scoped)}]"
        walk.origin[v] = origin
        param = str(names[i]) if i < len(names) and names[i] else None
        walk.scoped.append(dataclasses.replace(_scoped_operand(origin, v.aval), param=param,
                                               scope=scope))
    try:
        _walk_jaxpr(jaxpr, walk, repeated=repeated, kernel=kernel)
    finally:
        walk.regions.pop()


def _is_sync_copy(jaxpr: Any) -> bool:
    prims = [e.primitive.name for e in jaxpr.eqns]
    if prims != ["dma_start", "dma_wait"] or len(jaxpr.invars) != 1:
        return False
    sem = _dma_refs(jaxpr.eqns[0])[2]
    return sem is not None and _ref_var(sem) is jaxpr.invars[0]


def _scoped_operand(origin: str, aval: Any) -> Operand:
    inner = getattr(aval, "inner_aval", aval)
    dtype, value_type = element_type(getattr(inner, "dtype", None))
    return Operand(origin=origin, role="scratch", shape=tuple(int(s) for s in inner.shape),
                   dtype=dtype, memory_space=memory_space_of(aval), value_type=value_type)


# --- DMAs and semaphores -----------------------------------------------------------------------


def _dma_refs(eqn: Any) -> tuple[Any, Any, Any, Any, Any]:
    """(src, dst, dst semaphore, src semaphore, device id) of a dma_start / dma_wait."""
    return tuple(eqn.params["tree"].unflatten(eqn.invars))


def _dma(eqn: Any, walk: _Walk, repeated: bool, kind: str) -> DmaCopy:
    src, dst, sem, _, device_id = _dma_refs(eqn)
    src_aval, dst_aval, *_ = eqn.params["tree"].unflatten([v.aval for v in eqn.invars])
    window = _window_shape(dst_aval)
    dtype = _base_aval(dst_aval).dtype
    return DmaCopy(
        kind="remote" if device_id is not None else kind,  # type: ignore[arg-type]
        src=_name(src, walk), dst=_name(dst, walk),
        src_memory_space=memory_space_of(_base_aval(src_aval)),
        dst_memory_space=memory_space_of(_base_aval(dst_aval)),
        shape=window,
        dtype=np.dtype(dtype) if is_numpy_dtype(dtype) else np.dtype("int32"),
        semaphore=None if kind == "sync" or sem is None else _name(sem, walk),
        source=call_site_of(eqn), repeated=repeated,
        device_id=None if device_id is None else _expression(device_id, walk),
        device_id_type=None if device_id is None else _id_type(eqn.params),
    )


def _tma_copy(eqn: Any, walk: _Walk, repeated: bool) -> DmaCopy:
    """A Mosaic GPU TMA copy: (src, dst[, barrier]) then the flat transforms of each."""

    params = eqn.params
    to_smem = eqn.primitive.name == "copy_gmem_to_smem"
    barrier = eqn.invars[2] if to_smem and params.get("has_barrier") else None
    src, dst = eqn.invars[0], eqn.invars[1]
    leaves = iter(eqn.invars[3 if barrier is not None else 2:])
    src_tr = params["src_transforms_treedef"]
    src_transforms = src_tr.unflatten([next(leaves) for _ in range(src_tr.num_leaves)])
    dst_tr = params["dst_transforms_treedef"]
    dst_transforms = dst_tr.unflatten([next(leaves) for _ in range(dst_tr.num_leaves)])
    smem, transforms = (dst, dst_transforms) if to_smem else (src, src_transforms)
    aval = smem.aval.inner_aval
    try:  # the SMEM side's window (e.g. one slot of a multi-buffered ref)
        for t in transforms:
            aval = t.transform_type(aval)
        shape = tuple(aval.shape)
    except Exception:  # a transform without a static shape: the whole ref
        shape = tuple(smem.aval.shape)
    return DmaCopy(
        kind="tma", src=_name(src, walk), dst=_name(dst, walk),
        src_memory_space=memory_space_of(_base_aval(src.aval)),
        dst_memory_space=memory_space_of(_base_aval(dst.aval)),
        shape=tuple(_static_dim(s) for s in shape),
        dtype=element_type(smem.aval.inner_aval.dtype)[0],
        semaphore=None if barrier is None else _name(barrier, walk),
        source=call_site_of(eqn), repeated=repeated)


def _semaphore_op(eqn: Any, walk: _Walk) -> SemaphoreOp:
    parts = eqn.params["args_tree"].unflatten(eqn.invars)
    # signal's arguments: (sem, transforms, value, device_id, core_index)
    device = eqn.primitive.name == "semaphore_signal" and any(
        p is not None for p in parts[3:5])
    device_id = parts[3] if device else None
    return SemaphoreOp(_SEMAPHORE_OPS[eqn.primitive.name],  # type: ignore[arg-type]
                       walk.origin.get(parts[0], "local"), call_site_of(eqn), device=device,
                       device_id=None if device_id is None else _expression(device_id, walk))


_INFIX = {"add": "+", "sub": "-", "mul": "*", "rem": "%", "div": "//", "eq": "==", "lt": "<"}


def _expression(value: Any, walk: _Walk, depth: int = 8) -> str:
    """How the body computes `value` (a device id), from its equations: e.g.
    "(axis_index(x) + 1) % axis_size(x)"; a tuple of mesh coordinates as a tuple, the mesh
    form `{axis_name: index}` as "{x: (axis_index(x) + 1)}"; "?" for what it cannot say."""
    if isinstance(value, dict):
        items = [f"{k}: {_expression(v, walk, depth)}" for k, v in value.items()]
        return f"{{{', '.join(items)}}}"
    if isinstance(value, (tuple, list)):
        parts = [_expression(v, walk, depth) for v in value]
        return parts[0] if len(parts) == 1 else f"({', '.join(parts)})"
    if isinstance(value, jax_core.Literal):
        try:
            return str(np.asarray(value.val).item())
        except (TypeError, ValueError):
            return str(value.val)
    if not isinstance(value, jax_core.Var):
        return "?"  # not a value of the body (an unhashable or unknown object)
    eqn = walk.defs.get(value)
    if eqn is None or depth == 0:
        return walk.origin.get(value, "?")
    name = eqn.primitive.name
    if name in ("axis_index", "axis_size"):
        return f"{name}({eqn.params['axis_name']})"
    if name == "convert_element_type" and len(eqn.invars) == 1:
        return _expression(eqn.invars[0], walk, depth - 1)
    args = [_expression(v, walk, depth - 1) for v in eqn.invars]
    if name in _INFIX and len(args) == 2:
        return f"({args[0]} {_INFIX[name]} {args[1]})"
    return f"{name}({', '.join(args)})"


def _id_type(params: Any) -> str | None:
    kind = params.get("device_id_type")
    return None if kind is None else str(getattr(kind, "name", kind)).lower()


def _ref_var(ref: Any) -> Any:
    return ref.ref if isinstance(ref, state_types.TransformedRef) else ref


def _base_aval(aval: Any) -> Any:
    return aval.ref if isinstance(aval, state_types.TransformedRef) else aval


def _window_shape(aval: Any) -> tuple[int | None, ...]:
    """A copied window's shape; None for a dimension known only while the kernel runs (a
    `pl.ds(start, size)` whose size is a value of the body: JAX's type holds its aval)."""
    return tuple(_static_dim(s) for s in aval.shape)


def _static_dim(dim: Any) -> int | None:
    if isinstance(dim, jax_core.Literal):
        dim = dim.val
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
        return int(dim)
    return None  # a ShapedArray, a Var or a tracer: dynamic


def _name(ref: Any, walk: _Walk) -> str:
    """A ref's origin in the enclosing kernel ("local" for one the body made itself)."""
    return walk.origin.get(_ref_var(ref), "local")


def _bind(walk: _Walk, inner: Sequence[Any], outer: Sequence[Any]) -> None:
    for iv, ov in zip(inner, outer, strict=False):
        if isinstance(ov, jax_core.Var) and ov in walk.origin:
            walk.origin[iv] = walk.origin[ov]


# --- emit_pipeline --------------------------------------------------------------------------


def _pipeline(eqn: Any, walk: _Walk, kernel: Kernel, index: int) -> Kernel:
    """A nested `emit_pipeline` as a Kernel of kind "pipeline": its grid mapping read as a
    pallas_call's, each operand with the enclosing kernel's ref it windows (`outer`)."""

    params = eqn.params
    gm = params["grid_mapping"]
    body = params["body_jaxpr"]
    args = params["args_tree"].unflatten(eqn.invars)
    refs = params["refs_tree"].unflatten(list(args.refs_flat))
    flat_refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
    n_in = gm.num_inputs
    n_out = len(gm.block_mappings) - n_in
    user_body = pipeline_body(eqn, len(gm.block_mappings))
    spaces = {op.origin: op.memory_space for op in (*kernel.operands, *walk.scoped)}
    operands = []
    for k, bm in enumerate(gm.block_mappings):
        role = "input" if k < n_in else "output"
        origin = f"args[{k}]" if k < n_in else (
            "outputs" if n_out == 1 else f"outputs[{k - n_in}]")
        op = block_operand(bm, role, None)
        outer = _name(flat_refs[k], walk) if k < len(flat_refs) else None
        # emit_pipeline's blocks live in VMEM unless the BlockSpec says otherwise.
        space = "vmem" if op.memory_space == "default" else op.memory_space
        operands.append(dataclasses.replace(
            op, origin=origin, memory_space=space, outer=outer,
            in_place=_in_place(space, spaces.get(outer or "")),
            param=user_body.block_params[k]))
    grid = tuple(None if pallas_core.is_dynamic_dim(g) else int(g) for g in gm.grid)
    semantics = params.get("dimension_semantics")
    fn_name, source = user_body.name, user_body.source
    inner_semantics = tuple(semantics_name(s) for s in semantics) if semantics \
        else ("arbitrary",) * len(grid)
    # Index maps closing over values of the enclosing kernel: tiled over its grid x the inner
    # one when those values follow from its program ids; otherwise not at all (said).
    outer_grid: tuple[int, ...] = ()
    if not any(bm.index_map_jaxpr.consts for bm in gm.block_mappings):
        evaluator, why = index_map_evaluator(gm), None
    else:
        evaluator, why = None, (
            "its index maps use values the enclosing kernel computes while it runs (not "
            "only its program ids), so its windows are known only then")
        known = tuple(g for g in kernel.grid if g is not None)
        closure = outer_closure(args.all_index_map_consts, walk.defs, walk.aliases,
                                known) if len(known) == len(kernel.grid) else None
        if closure is not None:
            outer_grid = known
            evaluator, why = index_map_evaluator(gm, closure, len(outer_grid)), None
    handle = KernelHandle(eqn=eqn, index_map_evaluator=evaluator,
                          num_dynamic_grid=int(gm.num_dynamic_grid_bounds),
                          prefetch_concrete=False)
    outer_names = tuple(n for n in kernel.grid_names or ()) or tuple(
        f"outer {i}" for i in range(len(outer_grid)))
    full_grid = (*outer_grid, *grid)
    return Kernel(
        index=index, name=str(fn_name or "pipeline"), kind="pipeline", source=source,
        call_site=call_site_of(eqn), context=(*kernel.context, kernel.name), grid=full_grid,
        grid_names=(*outer_names, *(f"inner {i}" for i in range(len(grid))))
        if outer_grid else None,
        dynamic_grid_dims=tuple(i for i, g in enumerate(full_grid) if g is None),
        vmapped_dims=(),
        dimension_semantics=(*(kernel.dimension_semantics or ("arbitrary",) * len(outer_grid)),
                             *inner_semantics) if outer_grid else
        (inner_semantics if semantics else None),
        operands=tuple(operands), input_output_aliases=(), compiler_params={},
        backend="tpu", cost_estimate=None, kernel_jaxpr=str(body),
        traced_for_chip=kernel.traced_for_chip, dynamic_values_reason=why,
        outer_dims=len(outer_grid), handle=handle,
        preallocated=getattr(args, "allocations", None) is not None,
    )


def _in_place(space: str, outer_space: str | None) -> bool:
    """Does the pipeline window the outer ref where it is, with no copy? When the block's
    memory space is the outer ref's (or HBM): JAX's pipeline then slices the ref itself."""
    if space == "hbm":
        return True
    return outer_space is not None and (
        outer_space == space or (outer_space == "default" and space == "vmem"))


def mesh_scratch(body: Any, n_operands: int) -> tuple[Operand, ...]:
    """A mesh kernel's `scratch_types`: its body's parameters after the inputs and outputs."""
    return tuple(_scoped_operand(f"scratch[{j}]", v.aval)
                 for j, v in enumerate(body.invars[n_operands:]))

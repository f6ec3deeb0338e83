"""Reading a kernel equation into a frozen `Kernel`, and its vectorized index maps."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax._src import core as jax_core
from jax._src import source_info_util
from jax._src.pallas import core as pallas_core

from pallaslab.model._jax.base import PALLAS_CALL, KernelHandle
from pallaslab.model._jax.fusion import kernel_fusion
from pallaslab.model._jax.index_maps import _index_map_evaluator
from pallaslab.model._jax.param_names import with_params
from pallaslab.model._jax.trace import FoundKernel
from pallaslab.model.kernel import (
    BlockDim,
    CostEstimate,
    Kernel,
    MeshInfo,
    Operand,
)

# --------------------------------------------------------------------------------------------
# Equation -> Kernel


def kernel_from_eqn(
    found: FoundKernel, index: int, leading_values: list[np.ndarray] | None,
    structure: FoundKernel | None = None, traced_for_chip: str | None = None,
) -> Kernel:
    """`structure`: the same kernel from a trace with the emit_pipeline primitive, read for its
    nested pipelines; `traced_for_chip`: the chip whose abstract TPU the call was traced under.
    """
    if found.eqn.primitive is PALLAS_CALL:
        kernel = _pallas_call_kernel(found, index, leading_values)
    else:
        kernel = _mesh_kernel(found, index)
    return _with_nested(kernel, structure, traced_for_chip)


def _pallas_call_kernel(
    found: FoundKernel, index: int, leading: list[np.ndarray] | None
) -> Kernel:
    eqn = found.eqn
    params = eqn.params
    gm = params["grid_mapping"]
    n_dyn = gm.num_dynamic_grid_bounds
    dyn_values = leading[:n_dyn] if leading is not None else None
    prefetch_values = leading[n_dyn:] if leading is not None else None

    dynamic_dims = tuple(i for i, g in enumerate(gm.grid) if pallas_core.is_dynamic_dim(g))
    grid: list[int | None] = []
    dyn_iter = iter(dyn_values) if dyn_values is not None else None
    for g in gm.grid:
        if pallas_core.is_dynamic_dim(g):
            grid.append(int(next(dyn_iter)) if dyn_iter is not None else None)
        else:
            grid.append(int(g))

    kernel_jaxpr = params["jaxpr"]
    fn_name, source = _func_src(kernel_jaxpr)
    name = params.get("name") or fn_name or "kernel"
    compiler_params = _compiler_params(params.get("compiler_params"))
    backend = _backend_of(compiler_params)
    aliases = tuple((int(i), int(o)) for i, o in params.get("input_output_aliases", ()))
    operands = _with_selects(_pallas_call_operands(gm, aliases), found.selected_after)
    tpu = next((v for key, v in compiler_params.items() if key in _TPU_PARAM_KEYS), {})
    semantics = tpu.get("dimension_semantics")
    handle = KernelHandle(
        eqn=eqn,
        index_map_evaluator=_index_map_evaluator(gm),
        num_dynamic_grid=n_dyn,
        prefetch_concrete=prefetch_values is not None,
    )
    kernel = Kernel(
        index=index,
        name=str(name),
        kind="pallas_call",
        source=source,
        call_site=_call_site(eqn),
        context=found.context, device_mesh=_device_mesh(found),
        grid=tuple(grid),
        grid_names=tuple(str(n) for n in gm.grid_names) if gm.grid_names else None,
        dynamic_grid_dims=dynamic_dims,
        vmapped_dims=tuple(int(d) for d in gm.vmapped_dims),
        dimension_semantics=_full_semantics(semantics, len(grid), tuple(gm.vmapped_dims)),
        operands=operands,
        input_output_aliases=aliases,
        compiler_params=compiler_params,
        backend=backend,
        cost_estimate=_cost(params.get("cost_estimate")),
        kernel_jaxpr=str(kernel_jaxpr),
        prefetch_values=tuple(prefetch_values) if prefetch_values is not None else (),
        fusion=kernel_fusion(kernel_jaxpr, operands),
        handle=handle,
    )
    return with_params(kernel)


def _with_selects(operands: tuple[Operand, ...], sites: tuple[str | None, ...]
                  ) -> tuple[Operand, ...]:
    """Outputs every use of which goes through a select made at `sites` (one per output)."""
    outputs = [i for i, op in enumerate(operands) if op.role == "output"]
    chosen = dict(zip(outputs, sites, strict=False))
    return tuple(dataclasses.replace(op, selected_after=chosen[i]) if chosen.get(i) else op
                 for i, op in enumerate(operands))


def _pallas_call_operands(gm: Any, aliases: tuple[tuple[int, int], ...]) -> tuple[Operand, ...]:
    # Pallas numbers `args[i]` over the user's call: scalar-prefetch operands come first.
    n_prefetch = gm.num_index_operands
    operands: list[Operand] = []
    prefetch_avals = gm.index_map_avals[len(gm.grid):]
    prefetch_origins = _prefetch_origins(gm)
    for origin, aval in zip(prefetch_origins, prefetch_avals, strict=True):
        inner = getattr(aval, "inner_aval", aval)
        operands.append(Operand(
            origin=origin, role="input", shape=tuple(inner.shape),
            dtype=np.dtype(inner.dtype), memory_space="smem", scalar_prefetch=True,
        ))
    # input_output_aliases index the pallas_call operands (prefetch included) and outputs.
    alias_in = {i: o for i, o in aliases}
    alias_out = {o: i for i, o in aliases}
    origins = [bm.origin for bm in gm.block_mappings]
    in_origins = prefetch_origins + origins[: gm.num_inputs]
    for k, bm in enumerate(gm.block_mappings):
        is_input = k < gm.num_inputs
        role = "input" if is_input else "output"
        aliased = None
        if is_input and (n_prefetch + k) in alias_in:
            aliased = origins[gm.num_inputs + alias_in[n_prefetch + k]]
        elif not is_input and (k - gm.num_inputs) in alias_out:
            aliased = in_origins[alias_out[k - gm.num_inputs]]
        operands.append(_block_operand(bm, role, aliased))
    for j, aval in enumerate(gm.scratch_avals):
        inner = getattr(aval, "inner_aval", aval)
        shape = tuple(getattr(inner, "shape", ()))
        dtype, value_type = element_type(getattr(inner, "dtype", None))
        operands.append(Operand(
            origin=f"scratch[{j}]", role="scratch", shape=shape, dtype=dtype,
            memory_space=_memory_space(aval), value_type=value_type,
        ))
    return tuple(operands)


def _prefetch_origins(gm: Any) -> list[str]:
    """Pallas-style origins ("args[0]", "args[0][1]") of the scalar-prefetch leaves.

    The index maps are called with (*program_ids, *prefetch_args); the prefetch arguments are
    the first positional arguments of the user's call, possibly pytrees.
    """
    n = len(gm.index_map_avals)
    args, _ = gm.index_map_tree.unflatten(list(range(n)))
    prefetch_args = tuple(args[len(gm.grid):])
    leaves = jax.tree_util.tree_flatten_with_path(prefetch_args)[0]
    return ["args" + jax.tree_util.keystr(path) for path, _ in leaves]


def element_type(dtype: Any) -> tuple[np.dtype, str | None]:
    """(numpy dtype, None) for array elements; (int32 stand-in, its name) for barriers and
    semaphores."""
    if _is_numpy_dtype(dtype):
        return np.dtype(dtype), None
    return np.dtype("int32"), (str(getattr(dtype, "name", dtype)) if dtype is not None else None)


def _is_numpy_dtype(dtype: Any) -> bool:
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return dtype is not None


def _block_operand(bm: Any, role: str, aliased: str | None) -> Operand:
    block_dims = tuple(_block_dim(d) for d in bm.block_shape)
    memory_space = _memory_space(bm.transformed_block_aval)
    buffer_count: int | None = None
    if memory_space not in ("any", "hbm", "smem", "semaphore"):
        mode = bm.pipeline_mode
        count = getattr(mode, "buffer_count", 2) if mode is not None else 2
        buffer_count = int(count[0] if isinstance(count, tuple) else count)
    _, index_src = _func_src(bm.index_map_jaxpr)
    return Operand(
        origin=str(bm.origin),
        role=role,  # type: ignore[arg-type]
        shape=tuple(int(s) for s in bm.array_aval.shape),
        dtype=np.dtype(bm.array_aval.dtype),
        memory_space=memory_space,
        block_dims=block_dims,
        index_map_jaxpr=str(bm.index_map_jaxpr),
        index_map_source=index_src,
        buffer_count=buffer_count,
        aliased_with=aliased,
    )


def _block_dim(d: Any) -> BlockDim:
    match d:
        case pallas_core.Squeezed():
            return BlockDim("squeezed", 1)
        case pallas_core.Blocked(block_size=size):
            return BlockDim("blocked", int(size))
        case pallas_core.Element(block_size=size, padding=padding):
            return BlockDim("element", int(size), (int(padding[0]), int(padding[1])))
        case pallas_core.BoundedSlice(block_size=size):
            return BlockDim("bounded", int(size))
        case pallas_core.Indirect(block_size=size):
            return BlockDim("indirect", int(size))
    raise TypeError(f"unknown Pallas block dimension {d!r}")  # pragma: no cover


def _memory_space(aval: Any) -> str:
    space = getattr(aval, "memory_space", None)
    if space is None:
        return "default"
    value = getattr(space, "value", None)
    text = str(value if isinstance(value, str) else space)
    return text.rsplit(".", 1)[-1].lower()


def _full_semantics(
    semantics: Sequence[Any] | None, rank: int, vmapped: tuple[int, ...]
) -> tuple[str, ...] | None:
    """The user's dimension semantics over the whole grid: as Mosaic does, dims added by vmap
    are "parallel" (the user's semantics cover only their own grid)."""
    if semantics is None:
        return None
    user = iter(_semantics_name(s) for s in semantics)
    return tuple("parallel" if i in vmapped else next(user, "arbitrary") for i in range(rank))


def _semantics_name(s: Any) -> str:
    value = getattr(s, "value", s)
    return str(value).rsplit(".", 1)[-1].lower()


def _compiler_params(params: Any) -> dict[str, dict[str, Any]]:
    """Normalise compiler params to {backend: {field: value}}."""
    if params is None:
        return {}
    items = params.items() if isinstance(params, Mapping) else [(None, params)]
    out: dict[str, dict[str, Any]] = {}
    for key, value in items:
        backend = key or _params_backend(value)
        if dataclasses.is_dataclass(value):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        else:
            fields = dict(value) if isinstance(value, Mapping) else {"value": value}
        out[str(backend)] = fields
    return out


def _params_backend(value: Any) -> str:
    backend = getattr(value, "BACKEND", None)
    if backend:
        return str(backend).lower()
    module = type(value).__module__
    if "mosaic_gpu" in module:
        return "mosaic_gpu"
    if "triton" in module:
        return "triton"
    if "mosaic" in module:
        return "mosaic_tpu"
    return type(value).__name__


_TPU_PARAM_KEYS = frozenset({"mosaic_tpu", "tpu", "mosaic"})


def _backend_of(compiler_params: Mapping[str, Any]) -> Any:
    keys = set(compiler_params)
    if keys & _TPU_PARAM_KEYS:
        return "tpu"
    if "triton" in keys:
        return "triton"
    if keys & {"mosaic_gpu", "gpu"}:
        return "mosaic_gpu"
    return None


def _cost(cost: Any) -> CostEstimate | None:
    if cost is None:
        return None
    return CostEstimate(int(cost.flops), int(cost.transcendentals), int(cost.bytes_accessed))


_FUNC_SRC = re.compile(r"^(?P<name>.*?) at (?P<file>.+):(?P<line>\d+)$")


def _func_src(jaxpr: Any) -> tuple[str | None, str | None]:
    info = getattr(jaxpr, "debug_info", None)
    text = getattr(info, "func_src_info", None) if info is not None else None
    if not text:
        return None, None
    m = _FUNC_SRC.match(text)
    if m is None:
        return text, None
    return m["name"], f"{m['file']}:{m['line']}"


def _user_source(jaxpr: Any, name: str | None) -> str | None:
    """"file.py:LINE" of the user's function `name`, from the first sub-jaxpr traced from it
    (e.g. the `run_scoped` that allocates a plgpu.kernel's scratch)."""
    from pallaslab.model._jax.trace import all_sub_jaxprs

    for eqn in jaxpr.eqns:
        for sub in all_sub_jaxprs(eqn.params):
            sub_name, source = _func_src(sub)
            if sub_name == name and source is not None and "/jax/_src/" not in source:
                return source
            if found := _user_source(sub, name):
                return found
    return None


def _call_site(eqn: Any) -> str | None:
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    if frame is None:
        return None
    return f"{frame.file_name}:{frame.start_line}"


def _mesh_kernel(found: FoundKernel, index: int) -> Kernel:
    eqn = found.eqn
    params = eqn.params
    meshes = params["meshes"]
    jaxprs = params["jaxprs"]
    mesh = meshes[0]
    axes = tuple((str(k), int(v)) for k, v in mesh.shape.items())
    fn_name, source = _func_src(jaxprs[0])
    if source is not None and "/jax/_src/" in source:  # traced through a wrapper (plgpu.kernel)
        source = _user_source(jaxprs[0], fn_name) or source
    name = params.get("name") or fn_name or "kernel"
    compiler_params = _compiler_params(params.get("compiler_params"))
    body_avals = [v.aval for v in jaxprs[0].invars]
    n_in = len(eqn.invars)
    operands: list[Operand] = []
    for i, v in enumerate(eqn.invars):
        space = _memory_space(body_avals[i]) if i < len(body_avals) else "any"
        operands.append(Operand(origin=f"args[{i}]", role="input", shape=tuple(v.aval.shape),
                                dtype=np.dtype(v.aval.dtype), memory_space=space))
    outs = params["out_avals"]
    for j, aval in enumerate(outs):
        k = n_in + j
        space = _memory_space(body_avals[k]) if k < len(body_avals) else "any"
        origin = "outputs" if len(outs) == 1 else f"outputs[{j}]"
        operands.append(Operand(origin=origin, role="output", shape=tuple(aval.shape),
                                dtype=np.dtype(aval.dtype), memory_space=space))
    backend = _backend_of(compiler_params) or _mesh_backend(mesh)
    return with_params(Kernel(
        index=index, name=str(name), kind="mesh", source=source, call_site=_call_site(eqn),
        context=found.context, device_mesh=_device_mesh(found), grid=tuple(v for _, v in axes),
        grid_names=tuple(n for n, _ in axes), dynamic_grid_dims=(), vmapped_dims=(),
        dimension_semantics=None, operands=tuple(operands), input_output_aliases=(),
        compiler_params=compiler_params, backend=backend,
        cost_estimate=_cost(params.get("cost_estimate")),
        kernel_jaxpr="\n".join(str(j) for j in jaxprs),
        mesh=MeshInfo(type(mesh).__name__, axes, _warpgroups(mesh)),
        handle=KernelHandle(eqn=eqn, index_map_evaluator=None, num_dynamic_grid=0,
                            prefetch_concrete=False),
    ))


def _device_mesh(found: FoundKernel) -> MeshInfo | None:
    return MeshInfo("shard_map", found.device_mesh) if found.device_mesh else None


def _warpgroups(mesh: Any) -> tuple[str, int] | None:
    name, threads = getattr(mesh, "thread_name", None), getattr(mesh, "num_threads", None)
    return (str(name), int(threads)) if name is not None and threads else None


def argument_positions(closed_jaxpr: Any, kernel: Kernel) -> dict[str, int]:
    """Kernel input origin -> position among the traced call's flat arguments, for inputs that
    are one of those arguments unchanged (passed through `jit` and other call-once wrappers;
    not sliced, transposed, batched by a loop or computed). Caller-facing names hang off this.
    """
    eqn = kernel.handle.eqn
    target = id(eqn)
    top = closed_jaxpr.jaxpr
    found: dict[int, list[int | None]] = {}

    def walk(jaxpr: Any, env: dict[Any, int]) -> bool:
        for e in jaxpr.eqns:
            if id(e) == target:
                found[0] = [env.get(v) if isinstance(v, jax_core.Var) else None
                            for v in e.invars]
                return True
            if e.primitive.name in _CALL_ONCE_NAMES:
                subs = [v for v in e.params.values()
                        if isinstance(v, jax_core.Jaxpr)]
                if len(subs) == 1:
                    sub = getattr(subs[0], "jaxpr", subs[0])
                    inner = {sv: env[v] for v, sv in zip(e.invars, sub.invars, strict=False)
                             if isinstance(v, jax_core.Var) and v in env}
                    if walk(sub, inner):
                        return True
        return False

    walk(top, {v: i for i, v in enumerate(top.invars)})
    positions = found.get(0)
    if positions is None:
        return {}
    if eqn.primitive is PALLAS_CALL:
        skip = eqn.params["grid_mapping"].num_dynamic_grid_bounds
        inputs = [op.origin for op in kernel.operands if op.role == "input"]
    else:
        skip, inputs = 0, [op.origin for op in kernel.inputs]
    return {origin: pos for origin, pos in zip(inputs, positions[skip:], strict=False)
            if pos is not None}


_CALL_ONCE_NAMES = frozenset({"jit", "pjit", "closed_call", "core_call", "remat", "checkpoint"})


def _mesh_backend(mesh: Any) -> Any:
    module = type(mesh).__module__
    if "mosaic_gpu" in module:
        return "mosaic_gpu"
    if "mosaic" in module:
        return "tpu"
    return None


# --------------------------------------------------------------------------------------------
# Beyond BlockSpecs: mesh scratch, nested pipelines, scoped buffers, DMAs, semaphores


def _with_nested(kernel: Kernel, structure: FoundKernel | None,
                 traced_for_chip: str | None) -> Kernel:
    from pallaslab.model._jax.nested import mesh_scratch, nested_structure

    eqn = kernel.handle.eqn
    if kernel.kind == "mesh":
        body = eqn.params["jaxprs"][0]
        names = body.debug_info.arg_names or ()
        scratch = tuple(
            dataclasses.replace(op, param=str(names[len(kernel.operands) + j]))
            if len(names) > len(kernel.operands) + j and names[len(kernel.operands) + j]
            else op
            for j, op in enumerate(mesh_scratch(body, len(kernel.operands))))
        kernel = dataclasses.replace(kernel, operands=(*kernel.operands, *scratch))
    kernel = dataclasses.replace(kernel, traced_for_chip=traced_for_chip)
    source_eqn = structure.eqn if structure is not None and \
        structure.eqn.primitive is eqn.primitive else eqn
    body = source_eqn.params["jaxpr"] if source_eqn.primitive is PALLAS_CALL else \
        source_eqn.params["jaxprs"][0]
    nested = nested_structure(kernel, body)
    return dataclasses.replace(kernel, pipelines=nested.pipelines, scoped=nested.scoped,
                               dmas=nested.dmas, semaphore_ops=nested.semaphore_ops,
                               structure_notes=nested.notes)

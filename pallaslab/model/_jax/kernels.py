"""Reading a kernel equation into a frozen `Kernel`, and its vectorized index maps."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax._src.pallas import core as pallas_core

from pallaslab.model._jax.base import PALLAS_CALL, KernelHandle, jaxpr_text
from pallaslab.model._jax.equation_fields import (
    block_operand,
    call_site_of,
    element_type,
    func_source,
    memory_space_of,
    semantics_name,
)
from pallaslab.model._jax.fusion import kernel_fusion
from pallaslab.model._jax.index_maps import index_map_evaluator
from pallaslab.model._jax.nested import mesh_scratch, nested_structure
from pallaslab.model._jax.param_names import with_params
from pallaslab.model._jax.trace import FoundKernel, all_sub_jaxprs
from pallaslab.model.kernel import (
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
    fn_name, source = func_source(kernel_jaxpr)
    name = params.get("name") or fn_name or "kernel"
    compiler_params = _compiler_params(params.get("compiler_params"))
    backend = _backend_of(compiler_params)
    aliases = tuple((int(i), int(o)) for i, o in params.get("input_output_aliases", ()))
    operands = _with_selects(_pallas_call_operands(gm, aliases), found.selected_after)
    tpu = next((v for key, v in compiler_params.items() if key in _TPU_PARAM_KEYS), {})
    semantics = tpu.get("dimension_semantics")
    handle = KernelHandle(
        eqn=eqn,
        index_map_evaluator=index_map_evaluator(gm),
        num_dynamic_grid=n_dyn,
        prefetch_concrete=prefetch_values is not None,
    )
    kernel = Kernel(
        index=index,
        name=str(name),
        kind="pallas_call",
        source=source,
        call_site=call_site_of(eqn),
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
        kernel_jaxpr=jaxpr_text(kernel_jaxpr),
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
        operands.append(block_operand(bm, role, aliased))
    for j, aval in enumerate(gm.scratch_avals):
        inner = getattr(aval, "inner_aval", aval)
        shape = tuple(getattr(inner, "shape", ()))
        dtype, value_type = element_type(getattr(inner, "dtype", None))
        operands.append(Operand(
            origin=f"scratch[{j}]", role="scratch", shape=shape, dtype=dtype,
            memory_space=memory_space_of(aval), value_type=value_type,
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


def _full_semantics(
    semantics: Sequence[Any] | None, rank: int, vmapped: tuple[int, ...]
) -> tuple[str, ...] | None:
    """The user's dimension semantics over the whole grid: as Mosaic does, dims added by vmap
    are "parallel" (the user's semantics cover only their own grid)."""
    if semantics is None:
        return None
    user = iter(semantics_name(s) for s in semantics)
    return tuple("parallel" if i in vmapped else next(user, "arbitrary") for i in range(rank))


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


def _user_source(jaxpr: Any, name: str | None) -> str | None:
    """"file.py:LINE" of the user's function `name`, from the first sub-jaxpr traced from it
    (e.g. the `run_scoped` that allocates a plgpu.kernel's scratch)."""
    for eqn in jaxpr.eqns:
        for sub in all_sub_jaxprs(eqn.params):
            sub_name, source = func_source(sub)
            if sub_name == name and source is not None and "/jax/_src/" not in source:
                return source
            if found := _user_source(sub, name):
                return found
    return None


def _mesh_kernel(found: FoundKernel, index: int) -> Kernel:
    eqn = found.eqn
    params = eqn.params
    meshes = params["meshes"]
    jaxprs = params["jaxprs"]
    mesh = meshes[0]
    axes = tuple((str(k), int(v)) for k, v in mesh.shape.items())
    fn_name, source = func_source(jaxprs[0])
    if source is not None and "/jax/_src/" in source:  # traced through a wrapper (plgpu.kernel)
        source = _user_source(jaxprs[0], fn_name) or source
    name = params.get("name") or fn_name or "kernel"
    compiler_params = _compiler_params(params.get("compiler_params"))
    body_avals = [v.aval for v in jaxprs[0].invars]
    n_in = len(eqn.invars)
    operands: list[Operand] = []
    for i, v in enumerate(eqn.invars):
        space = memory_space_of(body_avals[i]) if i < len(body_avals) else "any"
        operands.append(Operand(origin=f"args[{i}]", role="input", shape=tuple(v.aval.shape),
                                dtype=np.dtype(v.aval.dtype), memory_space=space))
    outs = params["out_avals"]
    for j, aval in enumerate(outs):
        k = n_in + j
        space = memory_space_of(body_avals[k]) if k < len(body_avals) else "any"
        origin = "outputs" if len(outs) == 1 else f"outputs[{j}]"
        operands.append(Operand(origin=origin, role="output", shape=tuple(aval.shape),
                                dtype=np.dtype(aval.dtype), memory_space=space))
    backend = _backend_of(compiler_params) or _mesh_backend(mesh)
    return with_params(Kernel(
        index=index, name=str(name), kind="mesh", source=source, call_site=call_site_of(eqn),
        context=found.context, device_mesh=_device_mesh(found), grid=tuple(v for _, v in axes),
        grid_names=tuple(n for n, _ in axes), dynamic_grid_dims=(), vmapped_dims=(),
        dimension_semantics=None, operands=tuple(operands), input_output_aliases=(),
        compiler_params=compiler_params, backend=backend,
        cost_estimate=_cost(params.get("cost_estimate")),
        kernel_jaxpr="\n".join(jaxpr_text(j) for j in jaxprs),
        mesh=MeshInfo(type(mesh).__name__, axes, _warpgroups(mesh)),
        handle=KernelHandle(eqn=eqn, index_map_evaluator=None, num_dynamic_grid=0,
                            prefetch_concrete=False),
    ))


def _device_mesh(found: FoundKernel) -> MeshInfo | None:
    return MeshInfo("shard_map", found.device_mesh) if found.device_mesh else None


def _warpgroups(mesh: Any) -> tuple[str, int] | None:
    name, threads = getattr(mesh, "thread_name", None), getattr(mesh, "num_threads", None)
    return (str(name), int(threads)) if name is not None and threads else None


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

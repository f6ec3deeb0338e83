"""One-program runners of mesh kernels, for the stepper: a TPU mesh kernel (`pl.kernel` /
`pl.core_map`) one core at a time, its body discharged; a Mosaic GPU kernel (`plgpu.kernel`)
one block at a time, under JAX's Mosaic GPU interpreter."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax._src import core as jax_core
from jax._src import linear_util as lu
from jax._src.interpreters import partial_eval as pe
from jax._src.pallas import core as pallas_core

from pallaslab.model._jax import rewrite
from pallaslab.model._jax.gpu_global_semaphores import launch_counts
from pallaslab.model._jax.gpu_interpret_rules import interpreter_rules
from pallaslab.model._jax.runner import ProgramRunner, scratch_init
from pallaslab.model.kernel import Kernel


def mesh_program_runner(kernel: Kernel) -> ProgramRunner:
    """A TPU mesh kernel (`pl.kernel` / `pl.core_map`) as one program per core: its "grid"
    is the mesh (program ids = mesh coordinates), every operand is one whole-array block,
    and `jax.lax.axis_index` of a mesh axis reads the program id, as Pallas itself runs a
    mesh kernel on the CPU (a pallas_call over the mesh shape), its scratch its own. Each
    core runs alone, so cores that signal each other cannot be stepped this way."""
    from jax._src.pallas import hlo_interpreter

    eqn = kernel.handle.eqn
    if len(eqn.params["jaxprs"]) != 1:
        raise NotImplementedError(f"mesh kernel {kernel.name} pairs several meshes and "
                                  "functions (mpmd_map): one core's program is not one body")
    (jaxpr,), (mesh,) = eqn.params["jaxprs"], eqn.params["meshes"]
    names = tuple(mesh.shape)
    grid = tuple(int(v) for v in mesh.shape.values())
    gm = _mesh_grid_mapping(jaxpr, mesh, len(eqn.invars), len(eqn.params["out_avals"]))
    n_inout = gm.num_inputs + gm.num_outputs

    @functools.cache
    def discharged_at(ids: tuple[int, ...]) -> Any:
        # One body per core, its mesh coordinates constants: `run_scoped` bodies are
        # discharged only when lowered, where no grid environment could supply them.
        def coordinate(axis_name: Any) -> Any:
            index = 0  # several axes: their linear index, the last axis fastest
            for name in axis_name if isinstance(axis_name, tuple) else (axis_name,):
                d = names.index(name)
                index = index * grid[d] + ids[d]
            return jnp.int32(index)

        body = _axis_index_replaced(jaxpr, set(names), coordinate, gm)
        return hlo_interpreter.kernel_to_hlo_jaxpr(body, (), gm)

    @functools.cache
    def compiled(ids: tuple[int, ...]) -> Callable[..., Any]:
        discharged = discharged_at(ids)[0]

        def one_program(blocks: tuple, scratch: tuple) -> Any:
            outs = jax_core.eval_jaxpr(discharged.jaxpr, discharged.consts, *blocks, *scratch)
            return list(outs[:n_inout]), list(outs[n_inout:])

        return jax.jit(one_program)

    def run(ids: Any, scalars: tuple, blocks: tuple, scratch: tuple) -> Any:
        return compiled(tuple(int(i) for i in ids))(tuple(blocks), tuple(scratch))

    first, _, scratch_avals = discharged_at((0,) * len(grid))
    shapes = tuple(tuple(bm.array_aval.shape) for bm in gm.block_mappings)
    return ProgramRunner(
        run=run, grid=grid, block_shapes=shapes,
        squeezed=tuple((False,) * len(s) for s in shapes),
        blocked=tuple((True,) * len(s) for s in shapes),
        element_padding=tuple(((0, 0),) * len(s) for s in shapes),
        num_inputs=gm.num_inputs, num_outputs=gm.num_outputs,
        scratch_init=scratch_init(scratch_avals),
        discharged=first, vmapped_dims=(),
        aliases=tuple((int(i), int(o)) for i, o in eqn.params["input_output_aliases"].items()),
        discharged_at=lambda ids: discharged_at(tuple(int(i) for i in ids))[0],
        mesh_axes=names,
    )


def mosaic_gpu_block_runner(kernel: Kernel) -> ProgramRunner:
    """A Mosaic GPU kernel (`plgpu.kernel`) as one program per block of its grid, each run by
    JAX's Mosaic GPU interpreter: the kernel re-bound over a one-block mesh whose grid
    coordinates (`axis_index` of a grid axis) are the block's, its outputs aliased to extra
    inputs holding their current contents, so the block writes into what earlier blocks left.
    TMA copies and barriers have no discharge rule, so the body is interpreted, not discharged;
    the warpgroups of a block (and the blocks of a cluster) run together, as threads."""
    from jax._src.pallas import mpmd
    from jax.experimental.pallas import mosaic_gpu as plgpu

    eqn = kernel.handle.eqn
    if len(eqn.params["jaxprs"]) != 1:
        raise NotImplementedError(f"mesh kernel {kernel.name} pairs several meshes and "
                                  "functions (mpmd_map): one block's program is not one body")
    (jaxpr,), (mesh,) = eqn.params["jaxprs"], eqn.params["meshes"]
    names, grid = tuple(mesh.grid_names), tuple(int(g) for g in mesh.grid)
    n_in, n_out = len(eqn.invars), len(eqn.params["out_avals"])
    aliases = dict(eqn.params["input_output_aliases"])  # input -> output
    fresh = [j for j in range(n_out) if j not in aliases.values()]  # outputs given as inputs
    one_block = dataclasses.replace(mesh, grid=(1,) * len(grid))
    avals = [v.aval for v in jaxpr.invars]
    counts = launch_counts()  # the blocks stepped are one launch: global semaphores shared

    @functools.cache
    def body_at(ids: tuple[int, ...]) -> Any:
        def of_grid(e: Any) -> bool:
            name = e.params.get("axis_name") if e.primitive.name == "axis_index" else None
            return name is not None and set(
                name if isinstance(name, tuple) else (name,)) <= set(names)

        def coordinate(e: Any, _: list[Any]) -> list[Any]:
            name = e.params["axis_name"]
            index = 0  # several axes: their linear index, the last axis fastest
            for n in name if isinstance(name, tuple) else (name,):
                d = names.index(n)
                index = index * grid[d] + ids[d]
            return [jnp.int32(index)]

        def body(*refs: Any) -> list[Any]:  # inputs, current outputs, outputs, scratch
            kept = [*refs[:n_in], *refs[n_in + len(fresh):]]
            return rewrite.eval_replacing(jaxpr, jaxpr.consts, kept, of_grid, coordinate)

        in_avals = [*avals[:n_in], *(avals[n_in + j] for j in fresh), *avals[n_in:]]
        with mpmd.mpmd_map_tracing_context(one_block, ()):
            new, _, consts = pe.trace_to_jaxpr_dynamic(
                lu.wrap_init(body, debug_info=jaxpr.debug_info), in_avals)
        if consts:
            raise NotImplementedError(f"mesh kernel {kernel.name}: its body closes over "
                                      "arrays, which a one-block kernel cannot carry")
        params = dict(eqn.params, jaxprs=(new,), meshes=(one_block,),
                      interpret=plgpu.InterpretGPUParams(),
                      input_output_aliases=type(eqn.params["input_output_aliases"])(
                          {**aliases, **{n_in + k: j for k, j in enumerate(fresh)}}))
        return jax.jit(lambda *xs: mpmd.mpmd_map_p.bind(*xs, **params))

    def run(ids: Any, scalars: tuple, blocks: tuple, scratch: tuple) -> Any:
        ins, outs = list(blocks[:n_in]), list(blocks[n_in:])
        for i, j in aliases.items():  # an aliased output is its input's buffer
            ins[i] = outs[j]
        program = tuple(int(i) for i in ids)
        counts.rewound_to(program)  # the stepper went back: so do the semaphores
        with interpreter_rules(counts):  # traced on a block's first run
            new = body_at(program)(*ins, *(outs[j] for j in fresh))
        new = list(new)
        for i, j in aliases.items():
            ins[i] = new[j]
        return [*ins, *new], []

    shapes = tuple(tuple(int(d) for d in v.aval.shape) for v in jaxpr.invars[:n_in + n_out])
    return ProgramRunner(
        run=run, grid=grid, block_shapes=shapes,
        squeezed=tuple((False,) * len(s) for s in shapes),
        blocked=tuple((True,) * len(s) for s in shapes),
        element_padding=tuple(((0, 0),) * len(s) for s in shapes),
        num_inputs=n_in, num_outputs=n_out, scratch_init=(), discharged=None,
        vmapped_dims=(), aliases=tuple(aliases.items()), mesh_axes=names)


def _mesh_grid_mapping(jaxpr: Any, mesh: Any, n_in: int, n_out: int) -> Any:
    """The grid mapping Pallas gives a mesh kernel it runs on the CPU (mpmd.py's fallback
    lowering): the mesh shape as a named grid, whole-array blocks, the rest scratch."""
    from jax._src import tree_util
    from jax._src.state import types as state_types

    avals = [v.aval for v in jaxpr.invars]
    inner = [a.inner_aval if isinstance(a, state_types.AbstractRef) else a for a in avals]

    def spec(aval: Any) -> Any:
        space = getattr(aval, "memory_space", None)
        return pallas_core.BlockSpec(memory_space=space if space is not None and not isinstance(
            space, jax_core.MemorySpace) else mesh.default_memory_space)

    grid_spec = pallas_core.GridSpec(
        grid=tuple(mesh.shape.items()),
        in_specs=tuple(spec(a) for a in avals[:n_in]),
        out_specs=tuple(spec(a) for a in avals[n_in:n_in + n_out]),
        scratch_shapes=tuple(pallas_core.MemoryRef(a.inner_aval, a.memory_space)
                             for a in avals[n_in + n_out:]))
    _, gm = pallas_core.get_grid_mapping(
        grid_spec, inner[:n_in], tree_util.tree_structure(tuple(range(n_in))),
        [f"args[{i}]" for i in range(n_in)], inner[n_in:n_in + n_out],
        tree_util.tree_structure(tuple(range(n_out))),
        [f"outputs[{i}]" for i in range(n_out)])
    return gm


def _axis_index_replaced(jaxpr: Any, axes: set[str], value: Callable[[Any], Any],
                         gm: Any) -> Any:
    """The kernel body with every `axis_index` of a mesh axis (at any depth: `pl.when`,
    loops, `run_scoped`) replaced by `value(axis_name)`, traced in the grid's environment."""

    def of_mesh(eqn: Any) -> bool:
        if eqn.primitive.name != "axis_index":
            return False
        name = eqn.params.get("axis_name")
        return set(name if isinstance(name, tuple) else (name,)) <= axes

    with gm.trace_env():
        return rewrite.retrace_replacing(
            jaxpr, of_mesh, lambda eqn, _: [value(eqn.params["axis_name"])])


def mesh_interpret_buffers(kernel: Kernel) -> dict[tuple[str, int], str]:
    """(memory space, buffer id) -> operand origin in TPU interpret mode's log, for a TPU mesh
    kernel: the interpreter runs it as a pallas_call over the mesh whose operands all stay in
    HBM (ids from 100, inputs then outputs), then its VMEM/SMEM scratch, one id each (every
    core has its own buffer under that id). Ids it does not explain map to nothing."""
    if kernel.kind != "mesh" or kernel.backend == "mosaic_gpu":
        return {}
    found: dict[tuple[str, int], str] = {}
    next_id = 100
    for op in kernel.operands:
        if op.role != "scratch" and not op.scalar_prefetch:
            found[("hbm", next_id)] = op.origin
            next_id += 1
    for op in kernel.operands:
        if op.role == "scratch" and op.memory_space in ("vmem", "smem"):
            found[(op.memory_space, next_id)] = op.origin
            next_id += 1
    semaphore = 2000  # semaphores have their own ids, from 2000, one per element
    for op in kernel.operands:
        if op.role == "scratch" and op.memory_space.startswith("semaphore"):
            for i in range(math.prod(op.shape)):
                found[("semaphore", semaphore)] = op.origin if not op.shape else \
                    f"{op.origin}[{i}]"
                semaphore += 1
    return found

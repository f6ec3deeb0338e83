"""Executors and the program stepper: one-program runners, equation values, operands."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src import source_info_util
from jax._src.pallas import core as pallas_core

from pallaslab.model._jax import cross_call_semaphores as semaphores
from pallaslab.model._jax import hlo_bodies, mesh_runners
from pallaslab.model._jax.base import CALL_ONCE, KERNEL_PRIMITIVES, PALLAS_CALL, Jaxpr
from pallaslab.model._jax.equation_fields import call_site_of, memory_space_of
from pallaslab.model._jax.rerun import override_params, rewrite_value
from pallaslab.model._jax.runner import ProgramRunner, scratch_init
from pallaslab.model._jax.trace import bind_eqn, find_kernels, interpret_jaxpr, single_sub_jaxpr
from pallaslab.model.kernel import (
    Kernel,
)

# ============================================================================================
# Executors and the program stepper (pallaslab.execute; owned by its helper). Begin.


# TPU interpret mode logs detected races through this module's logger.
RACE_LOGGER = "jax._src.pallas.mosaic.interpret.race_detection_state"


def program_runner(kernel: Kernel) -> ProgramRunner:
    """The kernel's one-program runner: a grid program of a `pallas_call`, or one core of a
    TPU mesh kernel (`mesh_program_runner`)."""
    from jax._src.pallas import hlo_interpreter

    if kernel.kind == "mesh" and kernel.backend == "mosaic_gpu":
        return mesh_runners.mosaic_gpu_block_runner(kernel)
    if kernel.kind == "mesh":
        return mesh_runners.mesh_program_runner(kernel)
    eqn = kernel.handle.eqn
    gm = eqn.params["grid_mapping"]
    body = {**eqn.params, **hlo_bodies.rewritten_body(eqn)}["jaxpr"]  # as interpret runs it
    discharged, _, scratch_avals = hlo_interpreter.kernel_to_hlo_jaxpr(body, (), gm)
    grid = tuple(int(g) for g in kernel.grid)  # type: ignore[arg-type]
    n_index = gm.num_index_operands
    n_inout = gm.num_inputs + gm.num_outputs
    vmapped = tuple(int(d) for d in gm.vmapped_dims)

    def one_program(ids: jax.Array, scalars: tuple, blocks: tuple, scratch: tuple):
        env = _local_grid_env(gm, ids, grid)
        with pallas_core.grid_env(env):
            outs = jax_core.eval_jaxpr(discharged.jaxpr, discharged.consts,
                                       *scalars, *blocks, *scratch)
        return list(outs[n_index:n_index + n_inout]), list(outs[n_index + n_inout:])

    dims = [tuple(bm.block_shape) for bm in gm.block_mappings]
    return ProgramRunner(
        run=jax.jit(one_program),
        grid=grid,
        block_shapes=tuple(tuple(pallas_core._get_block_shape(d)) for d in dims),
        squeezed=tuple(tuple(isinstance(b, pallas_core.Squeezed) for b in d) for d in dims),
        blocked=tuple(tuple(isinstance(b, pallas_core.Blocked) for b in d) for d in dims),
        element_padding=tuple(
            tuple(b.padding if isinstance(b, pallas_core.Element) else (0, 0) for b in d)
            for d in dims),
        num_inputs=gm.num_inputs,
        num_outputs=gm.num_outputs,
        scratch_init=scratch_init(scratch_avals),
        discharged=discharged,
        vmapped_dims=vmapped,
        aliases=tuple((int(i) - n_index, int(o))
                      for i, o in eqn.params.get("input_output_aliases", ())),
    )


def _local_grid_env(gm: Any, ids: Any, grid: tuple[int, ...]) -> tuple[Any, ...]:
    if gm.local_grid_env is not None:
        return gm.local_grid_env(tuple(ids[d] for d in range(len(grid))), grid)
    return tuple(pallas_core.GridAxis(ids[d], b) for d, b in enumerate(grid)
                 if d not in gm.vmapped_dims)


def semaphore_counts(shape: Sequence[int]) -> np.ndarray:
    """A semaphore passed out of a kernel, as the interpreters start it: counts of zero."""
    return np.zeros(tuple(shape), np.dtype(pallas_core.SEMAPHORE_INTERPRET_DTYPE))


def uninitialized(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """What Pallas's HLO interpreter fills unwritten memory with: NaN, int min, False."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating) or dtype.name in ("bfloat16",) or "float" in dtype.name:
        return np.full(tuple(shape), np.nan, dtype)
    if np.issubdtype(dtype, np.integer):
        return np.full(tuple(shape), np.iinfo(dtype).min, dtype)
    if dtype == np.bool_:
        return np.zeros(tuple(shape), dtype)
    return np.zeros(tuple(shape), dtype)


@dataclasses.dataclass(frozen=True)
class EquationValue:
    """One top-level equation of a program's (discharged) kernel body, as evaluated."""

    index: int
    primitive: str
    text: str  # the equation, pretty-printed (first line)
    source: str | None  # "file.py:LINE" of the user's code that produced it
    outputs: tuple[np.ndarray, ...]


def program_equations(runner: ProgramRunner, ids: Sequence[int], scalars: Sequence[Any],
                      blocks: Sequence[Any], scratch: Sequence[Any]) -> list[EquationValue]:
    """Evaluate one program's kernel body equation by equation, keeping every value."""
    discharged = runner.discharged if runner.discharged_at is None else \
        runner.discharged_at(ids)
    if discharged is None:
        raise NotImplementedError(
            "a Mosaic GPU body cannot be evaluated equation by equation: its TMA copies and "
            "barriers exist only inside JAX's Mosaic GPU interpreter (they have no discharge "
            "rule), which runs the block whole")
    jaxpr = discharged.jaxpr
    env: dict[Any, Any] = {}
    for v, x in zip(jaxpr.constvars, discharged.consts, strict=True):
        env[v] = x
    for v, x in zip(jaxpr.invars, [*scalars, *blocks, *scratch], strict=True):
        env[v] = jnp.asarray(x)

    def read(a: Any) -> Any:
        return a.val if isinstance(a, jax_core.Literal) else env[a]

    context = jax_core.JaxprPpContext()
    settings = jax_core.JaxprPpSettings()
    out: list[EquationValue] = []
    grid_ids = [jnp.int32(i) for i in ids]
    with pallas_core.grid_env(_local_grid_env_static(runner, grid_ids)):
        for k, eqn in enumerate(jaxpr.eqns):
            params = eqn.primitive.get_bind_params(eqn.params)
            with source_info_util.user_context(eqn.source_info.traceback,
                                               name_stack=eqn.source_info.name_stack), \
                    eqn.ctx.manager:
                ans = _bind_eagerly(eqn, [read(a) for a in eqn.invars], params)
            values = list(ans) if eqn.primitive.multiple_results else [ans]
            for v, x in zip(eqn.outvars, values, strict=True):
                env[v] = x
            text = jax_core.pp_eqn(eqn, context, settings).format()
            out.append(EquationValue(
                index=k, primitive=eqn.primitive.name, text=_one_line(text, eqn, context),
                source=call_site_of(eqn),
                outputs=tuple(np.asarray(x) for x in values),
            ))
    return out


def _bind_eagerly(eqn: Any, invals: list[Any], params: dict[str, Any]) -> Any:
    """Bind one equation on concrete values; primitives with no eager rule (`run_scoped`,
    whose lowering discharges it) are compiled for the purpose."""
    if eqn.primitive.name != "run_scoped":
        return eqn.primitive.bind(*invals, **params)
    return jax.jit(lambda *xs: eqn.primitive.bind(*xs, **params))(*invals)


def _one_line(text: str, eqn: Any, context: Any) -> str:
    """An equation on one line: sub-jaxprs (a `cond`'s branches) elided."""
    lines = text.splitlines()
    if len(lines) == 1:
        return text
    head = lines[0].rstrip().rstrip("[").rstrip()
    args = " ".join(str(a.val) if isinstance(a, jax_core.Literal) else
                    jax_core.pp_var(a, context).format() for a in eqn.invars)
    return f"{head}[...] {args}"


def _local_grid_env_static(runner: ProgramRunner, ids: list[Any]) -> tuple[Any, ...]:
    return tuple(pallas_core.GridAxis(ids[d], b) for d, b in enumerate(runner.grid)
                 if d not in runner.vmapped_dims)


def tpu_interpret_buffers(kernel: Kernel) -> dict[tuple[str, int], str]:
    """(memory space, buffer id) -> operand origin, for TPU interpret mode's messages.

    TPU interpret mode numbers buffers from 100 in allocation order (per kernel launch): HBM
    copies of the inputs, HBM outputs (aliased ones reuse their input's), SMEM scalar
    prefetch, then one buffer per kernel parameter that is not in HBM (input/output blocks,
    scratch). Mirrors `interpret_pallas_call`; ids it does not explain map to nothing.
    """
    eqn = kernel.handle.eqn
    if eqn.primitive is not PALLAS_CALL:
        return {}
    gm = eqn.params["grid_mapping"]
    aliased_outputs = {int(o) for _, o in eqn.params.get("input_output_aliases", ())}
    prefetch = [op for op in kernel.operands if op.scalar_prefetch]
    inputs = [op for op in kernel.inputs if not op.scalar_prefetch]
    body_ops = [op for op in kernel.operands if not op.scalar_prefetch]
    found: dict[tuple[str, int], str] = {}
    next_id = 100
    for op in inputs:
        found[("hbm", next_id)] = op.origin
        next_id += 1
    for j, op in enumerate(kernel.outputs):
        if j not in aliased_outputs:
            found[("hbm", next_id)] = op.origin
            next_id += 1
    for op in prefetch:
        found[("smem", next_id)] = op.origin
        next_id += 1
    n_blocks = gm.num_inputs + gm.num_outputs
    for i, op in enumerate(body_ops):
        space = (memory_space_of(gm.block_mappings[i].block_aval)
                 if i < n_blocks else op.memory_space)
        if space in ("any", "hbm"):
            continue
        if space in ("semaphore", "semaphore_mem"):
            continue  # semaphores have their own ids (block mappings say "semaphore_mem")
        found[(space if space != "default" else "vmem", next_id)] = op.origin
        next_id += 1
    return found


def kernel_operands(closed_jaxpr: Any, flat_args: Sequence[Any], kernel: Kernel,
                    interpret: Any = True) -> list[Any] | None:
    """The concrete operands the kernel equation is bound with when the traced function runs
    on `flat_args` (every kernel interpreted). Inside `scan` / `while` / `cond` these are the
    operands of its first launch (first iteration, taken branch). None when it is not launched
    for these arguments (a branch not taken, a loop that runs zero times) or sits in a mapped
    region such as `shard_map`."""
    target = kernel.handle.eqn

    class _Found(Exception):
        def __init__(self, values: list[Any]):
            self.values = values

    class _NotLaunched(Exception):
        pass

    def interpreted(e: Any) -> dict[str, Any]:
        return {"interpret": interpret}

    def eval_eqn(eqn: Any, ins: list[Any]) -> list[Any]:
        if eqn is target:  # a semaphore from an earlier kernel: its count, its copies made
            raise _Found(semaphores.kernel_inputs(eqn, ins) if is_pallas_call(eqn) else ins)
        if _first_launch(eqn, ins, target, eval_eqn):
            raise _NotLaunched  # entered the loop / branch holding the kernel: it never ran
        if semaphores.passes_semaphores(eqn):  # as interpret runs it, in program order
            return semaphores.run_in_order(eqn, ins)
        if eqn.primitive in KERNEL_PRIMITIVES:
            return bind_eqn(eqn, ins, override_params(eqn, interpreted(eqn)))
        params = {k: rewrite_value(v, interpreted)[0] for k, v in eqn.params.items()}
        return bind_eqn(eqn, ins, params)

    try:
        interpret_jaxpr(closed_jaxpr, flat_args, eval_eqn)
    except _Found as found:  # refs (inside `run_state`) as the values they hold
        return [x[...] if isinstance(x, jax_core.Ref) else x for x in found.values]
    except _NotLaunched:
        return None
    return None


def _first_launch(eqn: Any, ins: list[Any], target: Any,
                  eval_eqn: Callable[[Any, list[Any]], list[Any]]) -> bool:
    """Interpret the first iteration (scan, while) or the taken branch (cond) of an equation
    that holds `target`; False when `target` is not inside such an equation."""
    name, p = eqn.primitive.name, eqn.params
    if name == "scan" and _holds(p["jaxpr"], target):
        if p["length"] > 0:
            consts, carry, xs = _scan_operand_groups(p, ins)
            first = [x[-1] if p.get("reverse") else x[0] for x in xs]
            interpret_jaxpr(p["jaxpr"], [*consts, *carry, *first], eval_eqn)
        return True
    if name == "while" and _holds(p["body_jaxpr"], target):
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        carry = ins[cn + bn:]
        if bool(np.asarray(interpret_jaxpr(p["cond_jaxpr"], [*ins[:cn], *carry], eval_eqn)[0])):
            interpret_jaxpr(p["body_jaxpr"], [*ins[cn:cn + bn], *carry], eval_eqn)
        return True
    if name == "run_state" and _holds(p["jaxpr"], target):
        # The body works on refs initialised with the operands (`pl.run_state`): run it on
        # real refs, so the kernel finds them as the equations before it left them.
        refs = [jax.new_ref(x) for x in ins]
        interpret_jaxpr(p["jaxpr"], refs, eval_eqn)
        return True
    if name == "cond" and any(_holds(b, target) for b in p["branches"]):
        taken = min(max(int(np.asarray(ins[0])), 0), len(p["branches"]) - 1)
        if _holds(p["branches"][taken], target):
            interpret_jaxpr(p["branches"][taken], ins[1:], eval_eqn)
        return True
    return False


def _scan_operand_groups(params: Mapping[str, Any], ins: list[Any]) -> list[list[Any]]:
    """A scan's operands as [consts, carry, scanned-over]."""
    if "num_consts" in params:  # jax < 0.12
        nc, nk = int(params["num_consts"]), int(params["num_carry"])
        return [ins[:nc], ins[nc:nc + nk], ins[nc + nk:]]
    return [list(g) for g in params["ft_in"].update(list(ins)).unpack()]


def _holds(jaxpr: Jaxpr, target: Any) -> bool:
    return any(f.eqn is target for f in find_kernels(jaxpr))


def is_pallas_call(eqn: Any) -> bool:
    return eqn.primitive is PALLAS_CALL


def kernel_leading_invars(kernel: Kernel) -> list[Any]:
    """The variables a kernel equation is bound with (dynamic grid, prefetch, inputs)."""
    return list(kernel.handle.eqn.invars)


def output_sources(closed_jaxpr: Any, kernels: Sequence[Kernel]
                   ) -> list[tuple[int, int] | None]:
    """For each output of the traced function: (kernel index, output position) when it is
    a kernel's output unchanged (through jit-like calls; through shard_map, each device's
    output gathered), else None."""
    index = {id(k.handle.eqn): k.index for k in kernels}

    def sources(jaxpr: Jaxpr) -> list[tuple[int, int] | None]:
        made: dict[Any, tuple[int, int] | None] = {}
        for eqn in jaxpr.eqns:
            if id(eqn) in index:
                for j, v in enumerate(eqn.outvars):
                    made[v] = (index[id(eqn)], j)
            elif eqn.primitive.name in (*CALL_ONCE, "shard_map") and \
                    (sub := single_sub_jaxpr(eqn.params)) is not None:
                inner = sources(sub)
                for v, s in zip(eqn.outvars, inner, strict=False):
                    made[v] = s
        return [None if isinstance(v, jax_core.Literal) else made.get(v) for v in jaxpr.outvars]

    return sources(closed_jaxpr.jaxpr)


def full_dimension_semantics_params(kernel: Kernel) -> dict[str, Any] | None:
    """Compiler params whose TPU dimension semantics cover the whole grid (vmap adds grid
    dimensions but not their semantics; Mosaic treats them as parallel, TPU interpret mode
    rejects the mismatch)."""
    params = kernel.handle.eqn.params.get("compiler_params")
    if not kernel.vmapped_dims or params is None or kernel.dimension_semantics is None:
        return None
    semantics = getattr(params, "dimension_semantics", None)
    if semantics is None or len(semantics) == len(kernel.grid):
        return None
    return {"compiler_params": dataclasses.replace(
        params, dimension_semantics=tuple(kernel.dimension_semantics))}


# Executors and the program stepper. End.

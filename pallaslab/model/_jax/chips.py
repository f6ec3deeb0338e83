"""TPU chip facts (`jax._src.tpu_info`) and what the memory analysis reads off kernel bodies."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from pallaslab.model._jax.base import Jaxpr
from pallaslab.model._jax.trace import is_literal
from pallaslab.model.kernel import (
    Kernel,
)

# --------------------------------------------------------------------------------------------
# Chip facts (TPU generations) -- memory analysis appends below this line.


def tpu_chip_versions() -> tuple[str, ...]:
    """The TPU generations `jax._src.tpu_info` knows, by their `ChipVersion` value ("v5e")."""
    from jax._src import tpu_info

    return tuple(v.value for v in tpu_info.ChipVersion)


def tpu_chip_facts(version: str) -> dict[str, Any]:
    """Per-TensorCore facts of one TPU generation from `jax._src.tpu_info`, as plain data.

    Includes the sublane tiling JAX expects for 32-, 16-, 8- and 4-bit types (its heuristic for
    XLA's default second-minor tiling flags), which decides how Mosaic pads VMEM buffers.
    """
    from jax._src import tpu_info

    chip = tpu_info.ChipVersion(version)
    info = tpu_info.get_tpu_info_for_chip(chip, 1)
    facts: dict[str, Any] = {
        f.name: getattr(info, f.name)
        for f in dataclasses.fields(info)
        if f.name not in ("chip_version", "sparse_core")
    }
    sc = info.sparse_core  # per vector subcore: its own VMEM (TileSPMEM)
    facts["sparse_core"] = None if sc is None else {
        "cores": int(sc.num_cores), "subcores": int(sc.num_subcores),
        "vmem_bytes": int(sc.vmem_capacity_bytes)}
    facts["version"] = chip.value
    facts["physical_cores"] = chip.num_physical_tensor_cores_per_chip
    facts["megacore"] = chip.supports_megacore
    facts["sublane_tiling"] = {
        bits: info.get_sublane_tiling(dtype)
        for bits, dtype in ((32, np.float32), (16, jnp.bfloat16), (8, np.int8), (4, jnp.int4))
    }
    return facts



def constant_index_maps(kernel: Kernel) -> dict[str, bool]:
    """Per BlockSpec operand: does its index map return the same block for every program?

    Decided statically, as Mosaic does, from the index-map jaxpr: no output depends on the grid
    indices or on scalar-prefetch operands. Mosaic gives such a window a single VMEM buffer.
    """
    if kernel.kind != "pallas_call" or kernel.handle is None:  # None: traced elsewhere
        return {}
    gm = kernel.handle.eqn.params["grid_mapping"]
    return {str(bm.origin): _outputs_constant(bm.index_map_jaxpr.jaxpr)
            for bm in gm.block_mappings}


def _outputs_constant(jaxpr: Jaxpr) -> bool:
    dependent = set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        if any(not is_literal(v) and v in dependent for v in eqn.invars):
            dependent.update(eqn.outvars)
    return not any(not is_literal(v) and v in dependent for v in jaxpr.outvars)


def kernel_body_values(kernel: Kernel) -> list[tuple[tuple[int, ...], np.dtype, str]]:
    """(shape, dtype, primitive) of every array value the kernel body computes (not refs),
    descending into `pl.when` / loop bodies. Used to flag values the compiler may spill."""
    eqn = kernel.handle.eqn if kernel.handle is not None else None
    if eqn is None:
        return []
    jaxprs = [eqn.params["jaxpr"]] if "jaxpr" in eqn.params else list(eqn.params.get("jaxprs", ()))
    out: list[tuple[tuple[int, ...], np.dtype, str]] = []
    for jaxpr in jaxprs:
        _collect_values(getattr(jaxpr, "jaxpr", jaxpr), out)
    return out


def _collect_values(jaxpr: Jaxpr, out: list[tuple[tuple[int, ...], np.dtype, str]]) -> None:
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            aval = v.aval
            shape = getattr(aval, "shape", None)
            dtype = getattr(aval, "dtype", None)
            if shape and dtype is not None and type(aval).__name__ == "ShapedArray":
                out.append((tuple(int(s) for s in shape), np.dtype(dtype), eqn.primitive.name))
        for value in eqn.params.values():
            for v in value if isinstance(value, tuple) else (value,):
                inner = v if isinstance(v, Jaxpr) else getattr(v, "jaxpr", None)
                if isinstance(inner, Jaxpr):
                    _collect_values(inner, out)


def kernel_body_cost(kernel: Kernel) -> tuple[int, int]:
    """(flops, transcendentals) of one kernel-body invocation, from Pallas's own cost rules
    (`jax._src.pallas.cost_estimate`). `pl.when`/`cond` branches count as taken (the costliest
    branch), `scan`/`fori_loop` bodies times their trip count; a `while` body once."""
    eqn = kernel.handle.eqn if kernel.handle is not None else None
    if eqn is None or "jaxpr" not in eqn.params:
        return 0, 0
    jaxpr = eqn.params["jaxpr"]
    return _body_cost(getattr(jaxpr, "jaxpr", jaxpr))


def _body_cost(jaxpr: Jaxpr) -> tuple[int, int]:
    from jax._src.pallas import cost_estimate

    flops = trans = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        rule = cost_estimate._cost_rules.get(eqn.primitive)
        if rule is not None:
            ctx = cost_estimate.Context(avals_in=[v.aval for v in eqn.invars],
                                        avals_out=[v.aval for v in eqn.outvars])
            cost = rule(ctx, **eqn.params)
            flops, trans = flops + int(cost.flops), trans + int(cost.transcendentals)
            continue
        subs = [s for value in eqn.params.values()
                for v in (value if isinstance(value, tuple) else (value,))
                if isinstance(s := getattr(v, "jaxpr", v), Jaxpr)]
        if not subs:
            continue
        costs = [_body_cost(s) for s in subs]
        if name == "cond":
            f, t = max(costs)
        else:
            f, t = sum(c[0] for c in costs), sum(c[1] for c in costs)
        times = int(eqn.params.get("length", 1)) if name == "scan" else 1
        flops, trans = flops + f * times, trans + t * times
    return flops, trans


def kernel_body_dots(kernel: Kernel) -> list[tuple[int, int, int, int]]:
    """(m, k, n, count) of every `dot_general` one kernel-body invocation runs: m the rows
    streamed through the MXU, k the contracted size, n the output columns, count the batch
    size times the loop trip counts around it (`pl.when`s as taken; siblings with the same
    dots once)."""
    out: list[tuple[int, int, int, int]] = []
    for jaxpr in body_jaxprs(kernel):
        _collect_dots(jaxpr, 1, out)
    return out


# Sibling `pl.when`s running the same dots are one computation written out per case, one
# case per step (splash attention's masked and unmasked block; a first step that writes the
# logits and later ones that add to them): they count once, as the costliest. Others add up.
def _collect_dots(jaxpr: Jaxpr, times: int, out: list[tuple[int, int, int, int]]) -> None:
    whens: dict[tuple[tuple[int, int, int, int], ...], list[tuple[int, int, int, int]]] = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            out.append(_dot_shape(eqn, times))
            continue
        trips = int(eqn.params.get("length", 1)) if eqn.primitive.name == "scan" else 1
        subs = subjaxprs(eqn)
        if eqn.primitive.name == "cond" and subs:
            branch: list[tuple[int, int, int, int]] = []
            _collect_dots(subs[-1], times, branch)  # a pl.when's taken branch is the last
            whens.setdefault(tuple(sorted(branch)), branch)
            continue
        for sub in subs:
            _collect_dots(sub, times * trips, out)
    for branch in whens.values():
        out.extend(branch)


def subjaxprs(eqn: Any) -> list[Jaxpr]:
    return [s for value in eqn.params.values()
            for v in (value if isinstance(value, tuple) else (value,))
            if isinstance(s := getattr(v, "jaxpr", v), Jaxpr)]


def _dot_shape(eqn: Any, times: int) -> tuple[int, int, int, int]:
    (lc, rc), (lb, _) = eqn.params["dimension_numbers"]
    lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    batch = int(np.prod([lhs[d] for d in lb])) if lb else 1
    k = int(np.prod([lhs[d] for d in lc])) if lc else 1
    m = int(np.prod([s for d, s in enumerate(lhs) if d not in lc and d not in lb]))
    n = int(np.prod([s for d, s in enumerate(rhs) if d not in rc and d not in eqn.params[
        "dimension_numbers"][1][1]]))
    return m, k, n, batch * times


# Primitives that move or relabel data without VPU arithmetic: ref loads/stores (vector
# load/store slots), shape changes, grid queries, DMAs and semaphores.
_NO_VPU_WORK = frozenset({
    "get", "swap", "load", "masked_load", "masked_swap", "reshape", "squeeze", "expand_dims",
    "broadcast_in_dim", "program_id", "num_programs", "dma_start", "dma_wait", "semaphore_signal",
    "semaphore_wait", "semaphore_read", "dot_general", "copy_p", "pjit", "jit", "closed_call",
    "run_scoped", "delay", "bitcast_convert_type", "tile"})
# Transcendentals (Pallas's own cost rules count these as `transcendentals`).
TRANSCENDENTAL = frozenset({
    "exp", "exp2", "log", "log1p", "expm1", "logistic", "tanh", "sin", "cos", "tan", "sqrt",
    "rsqrt", "pow", "erf", "erf_inv", "atan2", "asin", "acos", "atan", "sinh", "cosh"})


def kernel_body_vector_ops(kernel: Kernel) -> tuple[int, int]:
    """(element-ops, transcendental elements) one kernel-body invocation runs on the vector
    unit: every array-valued op other than dots, data movement and reshapes, one op per output
    element (reductions per input element). Scalar ops run on the scalar unit and are left
    out. Loops times their trip count; sibling `pl.when`s as for `kernel_body_dots`."""
    costs = [_vector_ops(j) for j in body_jaxprs(kernel)]
    return sum(c[0] for c in costs), sum(c[1] for c in costs)


def body_jaxprs(kernel: Kernel) -> list[Jaxpr]:
    """The kernel body: a pallas_call's jaxpr, or a mesh kernel's (core_map) jaxprs."""
    eqn = kernel.handle.eqn if kernel.handle is not None else None
    if eqn is None:
        return []
    jaxprs = [eqn.params["jaxpr"]] if "jaxpr" in eqn.params else list(eqn.params.get("jaxprs", ()))
    return [getattr(j, "jaxpr", j) for j in jaxprs]


def _vector_ops(jaxpr: Jaxpr) -> tuple[int, int]:
    ops = trans = 0
    whens: dict[tuple[tuple[int, int, int, int], ...], tuple[int, int]] = {}
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        subs = subjaxprs(eqn)
        if name == "cond" and subs:
            cost = max(_vector_ops(sub) for sub in subs)
            dots: list[tuple[int, int, int, int]] = []
            _collect_dots(subs[-1], 1, dots)
            key = tuple(sorted(dots)) if dots else ((-len(whens), 0, 0, 0),)  # no dots: own
            whens[key] = max(whens.get(key, (0, 0)), cost)
            continue
        if subs:
            costs = [_vector_ops(sub) for sub in subs]
            times = int(eqn.params.get("length", 1)) if name == "scan" else 1
            ops += sum(c[0] for c in costs) * times
            trans += sum(c[1] for c in costs) * times
            continue
        if name in _NO_VPU_WORK:
            continue
        vals = eqn.invars if name.startswith(("reduce_", "argm", "cum")) else eqn.outvars
        size = max((int(np.prod(getattr(v.aval, "shape", ()))) for v in vals
                    if type(v.aval).__name__ == "ShapedArray"), default=0)
        if size <= 1:
            continue
        ops += size
        if name in TRANSCENDENTAL:
            trans += size
    return ops + sum(w[0] for w in whens.values()), trans + sum(w[1] for w in whens.values())

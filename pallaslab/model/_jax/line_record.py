"""Who wrote each element: one program of a BlockSpec `pallas_call`, evaluated with a shadow
of every output block and scratch buffer that records, per element, the program and source
line of its last store, and flags each load that reads an element no program wrote yet.

The kernel body runs with its refs closed over (as `stores` does: control flow re-expressed
with `lax.switch` / `lax.while_loop` / `lax.scan`), then state is discharged and the whole
program jitted once. A shadow element holds `stamp + line` (`stamp` = (step + 1) x lines, so
0 is "never written"; the caller starts an aliased output at -1: its input's values, which
may be read): the caller keeps the shadows from program to program exactly like the
blocks and scratch (HLO interpreter semantics), and reads back program and line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax._src import core as jax_core
from jax._src import linear_util as lu
from jax._src.interpreters import partial_eval as pe
from jax._src.pallas import primitives as pallas_primitives
from jax._src.state import discharge as state_discharge
from jax._src.state.types import AbstractRef, TransformedRef

from pallaslab.model._jax import access_bounds, traced_control_flow
from pallaslab.model._jax.equation_fields import call_site_of
from pallaslab.model._jax.rewrite import HOST_OUTPUT, contains, eval_replacing, silenced_outputs
from pallaslab.model._jax.trace import bind_eqn

STORES = ("masked_swap", "swap", "addupdate")
LOADS = ("masked_load", "get")
STAMP = jnp.int32


class NotRecordable(Exception):
    """The body holds something the line recorder cannot follow (said in plain words)."""


@dataclasses.dataclass(frozen=True)
class LineRecorder:
    """`run(ids, stamp, scalars, blocks, scratch, shadows) -> (blocks, scratch, shadows,
    reads)`: one program; `shadows` one per output block then scratch buffer (`tracked`),
    `reads` one int32 flag per load site (1: it read an element no program wrote)."""

    run: Callable[..., tuple[list[Any], list[Any], list[Any], Any]]
    lines: tuple[str | None, ...]  # line id - 1 -> "path.py:LINE" of the store(s)
    read_lines: tuple[str | None, ...]  # load site -> "path.py:LINE"
    read_operand: dict[int, int]  # load site -> tracked position it reads (when known)
    dma_targets: set[int]  # tracked positions a waited DMA writes
    first_tracked: int  # body position (after scalar prefetch) of the first tracked ref
    tracked_shapes: tuple[tuple[int, ...], ...]
    spins: traced_control_flow.Spins  # check it after a run: a loop stopped by its bound


def line_recorder(eqn: Any) -> LineRecorder:
    """The recording runner of a `pallas_call` equation (raises NotRecordable)."""
    from jax._src.pallas import hlo_interpreter

    p = eqn.params
    gm = p["grid_mapping"]
    with gm.trace_env():  # semaphores as the integers the HLO interpreter counts with
        body, body_consts = hlo_interpreter.resolve_physical_types(p["jaxpr"], ())
    grid = tuple(int(g) for g in gm.grid)
    n_pre = gm.num_index_operands
    first = n_pre + gm.num_inputs  # body position of the first output ref
    tracked = [v.aval.inner_aval for v in body.invars[first:]]
    stores, loads = _sites(body, (*STORES, "dma_wait")), _sites(body, LOADS)
    lines = tuple(dict.fromkeys(call_site_of(e) for e in stores))
    line_id = {id(e): lines.index(call_site_of(e)) + 1 for e in stores}
    read_operand: dict[int, int] = {}
    dma_targets: set[int] = set()
    kept = [d for d in range(len(grid)) if d not in gm.vmapped_dims]
    spins = traced_control_flow.Spins()

    def fn(ids: Any, stamp: Any, *refs: Any) -> list[Any]:
        n = len(body.invars)
        program = _Program(ids, stamp, grid, kept, list(refs[:n]), first,
                           list(refs[n:n + len(tracked)]), refs[-1], line_id,
                           {id(e): k for k, e in enumerate(loads)}, read_operand,
                           dma_targets, spins)
        program.run(body, body_consts, refs[:n])
        return []

    avals = [jax_core.ShapedArray((len(grid),), jnp.int32), jax_core.ShapedArray((), STAMP),
             *[v.aval for v in body.invars],
             *[AbstractRef(jax_core.ShapedArray(a.shape, STAMP)) for a in tracked],
             AbstractRef(jax_core.ShapedArray((max(1, len(loads)),), jnp.int32))]
    with gm.trace_env():
        traced, _, consts = pe.trace_to_jaxpr_dynamic(
            lu.wrap_init(fn, debug_info=body.debug_info.with_unknown_names()), avals)
        discharged = state_discharge.discharge_state(traced.with_consts(consts),
                                                     strip_memory_space=True)
    n_body, n_track = len(body.invars), len(tracked)

    @jax.jit
    def run(ids: Any, stamp: Any, scalars: Any, blocks: Any, scratch: Any, shadows: Any,
            reads: Any) -> tuple[list[Any], list[Any], list[Any], Any]:
        outs = jax_core.eval_jaxpr(discharged, discharged.consts, ids, stamp, *scalars,
                                   *blocks, *scratch, *shadows, reads)
        body_outs = outs[:n_body]
        n_blocks = len(blocks)
        return (list(body_outs[n_pre:n_pre + n_blocks]), list(body_outs[n_pre + n_blocks:]),
                list(outs[n_body:n_body + n_track]), outs[-1])

    return LineRecorder(lambda ids, stamp, scalars, blocks, scratch, shadows: run(
        ids, stamp, scalars, blocks, scratch, shadows, jnp.zeros(max(1, len(loads)), jnp.int32)),
        lines, tuple(call_site_of(e) for e in loads), read_operand, dma_targets, first - n_pre,
        tuple(tuple(a.shape) for a in tracked), spins)


def _sites(jaxpr: Any, names: Sequence[str]) -> list[Any]:
    found = [e for e in jaxpr.eqns if e.primitive.name in names]
    for e in jaxpr.eqns:
        for sub in traced_control_flow.subjaxprs(e.params):
            found += _sites(sub, names)
    return list({id(e): e for e in found}.values())




def _instrumented(eqn: Any) -> bool:
    return eqn.primitive.name in (*STORES, *LOADS, "dma_start", "dma_wait", "program_id",
                                  "num_programs")


@dataclasses.dataclass
class _Program:
    """Evaluates one program's body inside the trace of the recording function."""

    ids: Any
    stamp: Any
    grid: tuple[int, ...]
    kept: list[int]
    refs: list[Any]
    first: int  # body position of the first tracked ref
    shadows: list[Any]
    reads: Any
    line_id: dict[int, int]
    load_site: dict[int, int]
    read_operand: dict[int, int]
    dma_targets: set[int]
    spins: traced_control_flow.Spins

    def run(self, jaxpr: Any, consts: Any, args: Sequence[Any]) -> list[Any]:
        return eval_replacing(jaxpr, consts, args, lambda eqn: True, self.equation)

    def equation(self, eqn: Any, invals: list[Any]) -> list[Any]:
        name = eqn.primitive.name
        if name == "program_id":
            return [self.ids[self.kept[eqn.params["axis"]]]]
        if name == "num_programs":
            return [jnp.int32(self.grid[self.kept[eqn.params["axis"]]])]
        if name in HOST_OUTPUT:
            return silenced_outputs(eqn)
        if name == "while" or any(contains(sub, _instrumented)
                                   for sub in traced_control_flow.subjaxprs(eqn.params)):
            return self._control_flow(eqn, invals)
        if name in LOADS:
            self._check_read(eqn, invals)
        outs = bind_eqn(eqn, invals, eqn.params)
        if name in STORES:
            self._mark(eqn, invals)
        elif name == "dma_wait":
            self._mark_dma(eqn, invals)
        elif name == "dma_start" and (dst := self._dma_destination(eqn, invals)):
            self.dma_targets.add(dst[0])
        return outs

    def _dma_destination(self, eqn: Any, invals: list[Any]
                         ) -> tuple[int, Any, tuple[Any, ...]] | None:
        """(tracked position, shadow, transforms) of a DMA's destination, if tracked."""
        _, dst, _, _, _ = eqn.params["tree"].unflatten(invals)
        ref, transforms = (dst.ref, tuple(dst.transforms)) if isinstance(
            dst, TransformedRef) else (dst, ())
        found = self._shadow_of(ref)
        return None if found is None else (found[0], found[1], transforms)

    def _shadow_of(self, ref: Any) -> tuple[int, Any] | None:
        index = next((i for i, r in enumerate(self.refs) if r is ref), None)
        j = -1 if index is None else index - self.first
        return (j, self.shadows[j]) if 0 <= j < len(self.shadows) else None

    def _mark(self, eqn: Any, invals: list[Any]) -> None:
        """Stamp the elements the store writes with this program's stamp and its line."""
        ref, transforms, mask = access_bounds.access_parts(eqn, invals)
        found = self._shadow_of(ref)
        if found is None:
            return
        shadow = found[1]
        value = (self.stamp + self.line_id[id(eqn)]).astype(STAMP)
        lanes = access_bounds.lanes(tuple(eqn.invars[0].aval.shape), transforms, mask)
        if lanes is not None:
            written = lanes.active & ~lanes.outside
            at = tuple(jnp.where(written, c, size)
                       for c, size in zip(lanes.coords, shadow.shape, strict=True))
            shadow[...] = shadow[...].at[at].set(
                jnp.broadcast_to(value, written.shape), mode="drop")
        elif "args_tree" in eqn.params:  # masked_swap: (ref, transforms, value, mask)
            _, transforms, val, mask = eqn.params["args_tree"].unflatten(invals)
            leaves, tree = jax.tree.flatten(
                (shadow, transforms, jnp.full(val.shape, value, STAMP), mask))
            pallas_primitives.swap_p.bind(*leaves, args_tree=tree, eviction_policy=None)
        else:
            _, val, *rest = invals
            params = dict(eqn.params)
            lax_swap = eqn.primitive if eqn.primitive.name == "swap" else None
            if lax_swap is None:
                raise NotRecordable("an `addupdate` through transforms it cannot follow")
            lax_swap.bind(shadow, jnp.full(val.shape, value, STAMP), *rest, **params)

    def _mark_dma(self, eqn: Any, invals: list[Any]) -> None:
        """A waited DMA has written its destination: stamp it with the wait's line (its data
        counts from the wait, not the start). Transforms not followed: the whole buffer."""
        found = self._dma_destination(eqn, invals)
        if found is None:
            return
        j, shadow, transforms = found
        self.dma_targets.add(j)
        value = (self.stamp + self.line_id[id(eqn)]).astype(STAMP)
        lanes = access_bounds.lanes(tuple(shadow.shape), transforms, None)
        if lanes is None:
            shadow[...] = jnp.full(shadow.shape, value, STAMP)
            return
        at = tuple(jnp.where(lanes.outside, size, c)
                   for c, size in zip(lanes.coords, shadow.shape, strict=True))
        shadow[...] = shadow[...].at[at].set(
            jnp.broadcast_to(value, lanes.outside.shape), mode="drop")

    def _check_read(self, eqn: Any, invals: list[Any]) -> None:
        """Flag the load when an element it reads (mask on, in range) was never written."""
        ref, transforms, mask = access_bounds.access_parts(eqn, invals)
        found = self._shadow_of(ref)
        if found is None:
            return
        j, shadow = found
        lanes = access_bounds.lanes(tuple(eqn.invars[0].aval.shape), transforms, mask)
        if lanes is None:
            return  # transforms not followed: no flag rather than a guess
        site = self.load_site[id(eqn)]
        self.read_operand[site] = j
        inside = lanes.active & ~lanes.outside
        at = tuple(jnp.clip(c, 0, size - 1) for c, size in zip(lanes.coords, shadow.shape,
                                                               strict=True))
        unwritten = jnp.any(inside & (shadow[...][at] == 0)).astype(jnp.int32)
        self.reads[site] = jnp.maximum(self.reads[site], unwritten)

    def _control_flow(self, eqn: Any, invals: list[Any]) -> list[Any]:
        def cannot(name: str) -> Exception:
            return NotRecordable(f"it cannot follow loads and stores inside a `{name}`")

        return traced_control_flow.follow(eqn, invals, self.run, cannot, self.spins)



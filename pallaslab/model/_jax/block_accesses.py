"""What each program's body loads and stores inside its blocks (slices, `pl.ds` windows,
strides, masks), element by element.

The kernel body of a `pallas_call` sees one block per operand. Here it is evaluated once per
program (programs `vmap`ped, their ids given as an input) on blocks of zeros (scalar prefetch:
the captured values), and every load / store of a body ref marks, in a shadow of that ref, the
elements its lanes touch: the lanes' coordinates come from the access's own indexers
(`access_bounds.lanes`), so a `pl.ds(start, size, stride)` with a start computed from
`program_id` or a loop index lands exactly where it would. Lanes a mask turns off are marked
apart, so a view can show them as not touched. Control flow (`pl.when`, `fori_loop`) is
re-expressed closing over the refs, as `stores` does, so an access in a branch or a loop still
knows which operand it touches.

A shadow element holds bits: READ / READ_MASKED (a load's lane there, masked off) and WRITE /
WRITE_MASKED for stores (and atomics). Accesses through other transforms (bitcasts, reshapes)
mark the whole ref and are reported as not followed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src import linear_util as lu
from jax._src.interpreters import partial_eval as pe
from jax._src.state import discharge as state_discharge
from jax._src.state.types import AbstractRef

from pallaslab.model._jax import access_bounds, traced_control_flow
from pallaslab.model._jax.access_bounds import ACCESSES
from pallaslab.model._jax.equation_fields import call_site_of
from pallaslab.model._jax.rewrite import HOST_OUTPUT, contains, eval_replacing, silenced_outputs
from pallaslab.model._jax.trace import bind_eqn

READ, READ_MASKED, WRITE, WRITE_MASKED = 1, 2, 4, 8
FLAGS = jnp.uint8
ATOMICS = ("atomic_rmw", "atomic_cas")
# Without a batching rule (a gap `vmap` cannot cross): evaluated as what they compute
VALUES: dict[str, Callable[..., Any]] = {
    "multiple_of": lambda x, **_: x, "max_contiguous": lambda x, **_: x,
    "broadcast_to": lambda x, shape, **_: jnp.broadcast_to(x, shape)}
REPLACED = ("program_id", "num_programs", *ACCESSES, *ATOMICS, *VALUES)


class NotRecordable(Exception):
    """The body holds something the recording cannot follow (said in plain words)."""


@dataclasses.dataclass(frozen=True)
class RecordedAccesses:
    """Per recorded program (row-major steps `steps`), per body ref: flags per element of the
    ref as the body sees it (its block; squeezed dims absent)."""

    steps: tuple[int, ...]
    flags: tuple[np.ndarray, ...]  # per ref: uint8 (len(steps), *ref shape)
    lines: tuple[tuple[str, ...], ...]  # per ref: "file.py:LINE" of its loads and stores
    not_followed: tuple[int, ...]  # refs reached through transforms not followed


def record_block_accesses(eqn: Any, prefetch: Sequence[Any], steps: Sequence[int],
                          grid: Sequence[int], byte_budget: int = 1 << 26) -> RecordedAccesses:
    """Evaluate the programs at row-major `steps` of a `pallas_call` equation over `grid`
    (dynamic dimensions resolved) and record the elements every load and store of each body
    ref touches."""
    gm = eqn.params["grid_mapping"]
    body = eqn.params["jaxpr"]
    grid = tuple(int(g) for g in grid)
    ref_avals = [v.aval.inner_aval for v in body.invars]
    if any(_not_an_array(a) for a in ref_avals):
        raise NotRecordable("the body holds semaphores or barriers (manual copies): only "
                            "BlockSpec blocks loaded and stored by the body are recorded")
    if contains(body, lambda e: e.primitive.name == "while"):
        # recording runs the body here, where nothing can stop a loop that never ends
        raise NotRecordable("the body has a while loop, which may not end: recording runs "
                            "the body in this process, with no time limit")
    traced, recorder = _instrumented(body, gm, grid, ref_avals)
    init = [_initial(a, prefetch[i] if i < len(prefetch) else None)
            for i, a in enumerate(ref_avals)]
    init += [jnp.zeros(a.shape, FLAGS) for a in ref_avals]
    n_refs = len(ref_avals)

    def program(pid: Any) -> list[Any]:
        return jax_core.eval_jaxpr(traced, traced.consts, pid, *init)[n_refs:2 * n_refs]

    all_ids = list(itertools.product(*(range(g) for g in grid)))
    ids = np.asarray([all_ids[s] for s in steps], np.int32).reshape(len(steps), len(grid))
    per_program = max(1, sum(math.prod(a.shape) for a in ref_avals))
    chunk = max(1, min(len(ids), byte_budget // per_program))
    run = jax.jit(jax.vmap(program))
    parts: list[list[np.ndarray]] = [[] for _ in ref_avals]
    for start in range(0, len(ids), chunk):
        for r, marks in enumerate(run(jnp.asarray(ids[start:start + chunk]))):
            parts[r].append(np.asarray(marks))
    flags = tuple(np.concatenate(p) if p else np.zeros((0, *a.shape), np.uint8)
                  for p, a in zip(parts, ref_avals, strict=True))
    return RecordedAccesses(tuple(int(s) for s in steps), flags,
                            tuple(tuple(d) for d in recorder.lines),
                            tuple(sorted(recorder.not_followed)))


def _not_an_array(aval: Any) -> bool:
    dtype = getattr(aval, "dtype", None)
    return dtype is None or not isinstance(dtype, np.dtype)  # semaphore / barrier types


def _initial(aval: Any, value: Any) -> Any:
    if value is not None and tuple(np.shape(value)) == tuple(aval.shape):
        return jnp.asarray(value, aval.dtype)
    return jnp.zeros(aval.shape, aval.dtype)


@dataclasses.dataclass
class _Recorder:
    lines: list[dict[str, None]]
    not_followed: set[int]


def _instrumented(body: Any, gm: Any, grid: tuple[int, ...], ref_avals: list[Any]
                  ) -> tuple[Any, _Recorder]:
    """The body as a pure jaxpr `(program ids, *ref values, *shadows) -> final values`."""
    n = len(ref_avals)
    recorder = _Recorder([{} for _ in range(n)], set())
    kept = [d for d in range(len(grid)) if d not in gm.vmapped_dims]

    def fn(pid: Any, *refs: Any) -> list[Any]:
        _Program(pid, grid, kept, list(refs[:n]), list(refs[n:]), recorder).run(
            body, body.consts, refs[:n])
        return []

    avals = [jax_core.ShapedArray((len(grid),), jnp.int32), *[v.aval for v in body.invars],
             *[AbstractRef(jax_core.ShapedArray(a.shape, FLAGS)) for a in ref_avals]]
    traced, _, consts = pe.trace_to_jaxpr_dynamic(
        lu.wrap_init(fn, debug_info=body.debug_info.with_unknown_names()), avals)
    return state_discharge.discharge_state(traced.with_consts(consts),
                                           strip_memory_space=True), recorder




def _replaced(eqn: Any) -> bool:
    return eqn.primitive.name in REPLACED


@dataclasses.dataclass
class _Program:
    """Evaluates one program's body (inside the trace of the instrumented body)."""

    pid: Any
    grid: tuple[int, ...]
    kept: list[int]
    refs: list[Any]
    shadows: list[Any]
    recorder: _Recorder

    def run(self, jaxpr: Any, consts: Any, args: Sequence[Any]) -> list[Any]:
        return eval_replacing(jaxpr, consts, args, lambda eqn: True, self.equation)

    def equation(self, eqn: Any, invals: list[Any]) -> list[Any]:
        name = eqn.primitive.name
        if name == "program_id":
            return [self.pid[self.kept[eqn.params["axis"]]]]
        if name == "num_programs":
            return [jnp.int32(self.grid[self.kept[eqn.params["axis"]]])]
        if name in HOST_OUTPUT:
            return silenced_outputs(eqn)
        if name in VALUES:
            return [VALUES[name](*invals, **eqn.params)]
        if name in ACCESSES or name in ATOMICS:
            self._record(eqn, invals)
        if name in ATOMICS:  # their results (old values) read as zeros: no GPU semantics here
            return [jnp.zeros(v.aval.shape, v.aval.dtype) for v in eqn.outvars]
        if any(contains(sub, _replaced)
               for sub in traced_control_flow.subjaxprs(eqn.params)):
            return self._control_flow(eqn, invals)
        return bind_eqn(eqn, invals, eqn.params)

    def _record(self, eqn: Any, invals: list[Any]) -> None:
        transforms: Sequence[Any]
        if eqn.primitive.name == "atomic_cas":
            ref, transforms, mask = invals[0], (), None
        else:
            ref, transforms, mask = access_bounds.access_parts(eqn, invals)
        index = next((i for i, r in enumerate(self.refs) if r is ref), None)
        if index is None:
            return  # a ref the body made itself (run_scoped): not an operand
        store = ACCESSES.get(eqn.primitive.name, ("store",))[0] != "load"
        if site := call_site_of(eqn):
            self.recorder.lines[index].setdefault(site)
        shadow = self.shadows[index]
        on, off = (WRITE, WRITE_MASKED) if store else (READ, READ_MASKED)
        lanes = access_bounds.lanes(tuple(shadow.shape), transforms, mask)
        if lanes is None:
            self.recorder.not_followed.add(index)
            shadow[...] = shadow[...] | jnp.asarray(on, FLAGS)
            return
        _mark(shadow, lanes, on, off)

    def _control_flow(self, eqn: Any, invals: list[Any]) -> list[Any]:
        def cannot(name: str) -> Exception:
            return NotRecordable(f"loads and stores inside a `{name}` cannot be followed")

        # no `while` reaches here (refused above), so no loop is bounded
        return traced_control_flow.follow(eqn, invals, self.run, cannot,
                                          traced_control_flow.Spins())


def _mark(shadow: Any, lanes: access_bounds.Lanes, on: int, off: int) -> None:
    """OR `on` into the elements active lanes inside the ref touch, `off` into those of lanes
    a mask turned off (lanes outside the ref touch nothing: no clamp)."""
    inside = jnp.ones(lanes.active.shape, bool)
    for c, size in zip(lanes.coords, shadow.shape, strict=True):
        inside = inside & (c >= 0) & (c < size)
    at = tuple(jnp.where(inside, c, size) for c, size in zip(lanes.coords, shadow.shape,
                                                             strict=True))
    bits = jnp.where(lanes.active, jnp.asarray(on, FLAGS), jnp.asarray(off, FLAGS))
    bits = jnp.where(inside, bits, jnp.asarray(0, FLAGS))
    old = shadow[...]
    touched = jnp.zeros(old.shape, FLAGS).at[at].max(bits, mode="drop")
    both = jnp.full(old.shape, 255, FLAGS).at[at].min(bits, mode="drop")
    # max and min over the lanes hitting one element: both bits when they differ
    shadow[...] = old | touched | jnp.where(touched > 0, both, jnp.asarray(0, FLAGS))



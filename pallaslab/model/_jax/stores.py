"""What each program of a whole-array kernel really stores and loads (masks, `pl.ds` included).

Triton kernels see whole-array refs and store through masked, offset indexers, so their
BlockSpec windows say nothing about who writes what. Here every program runs on its own copy
of the operands (the kernel body evaluated with `run_state`, programs `vmap`ped a chunk at a
time, their ids given as an input), and

- each load, store and atomic on an operand has its lanes' coordinates computed unclamped
  (`access_bounds`): lanes outside the array, not masked off, are counted per program;
- each plain store into an output marks the elements its active in-range lanes write in a
  shadow of the output: the shadow holds the elements the program stored. Atomic
  read-modify-writes mark nothing (programs may share elements through atomics by design;
  they are only recorded, by line); `atomic_xchg` marks its elements as written.

Control flow is re-expressed (`traced_control_flow`) closing over the refs, so an access
inside `pl.when` or a loop still knows which operand it touches; every `while` loop is
bounded, since this runs in the caller's process on seeded operands.
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
from jax import lax
from jax._src import core as jax_core
from jax._src import linear_util as lu
from jax._src.interpreters import partial_eval as pe
from jax._src.pallas import primitives as pallas_primitives
from jax._src.state import discharge as state_discharge
from jax._src.state.types import AbstractRef

from pallaslab.model._jax import access_bounds, traced_control_flow
from pallaslab.model._jax.access_bounds import ACCESSES
from pallaslab.model._jax.equation_fields import call_site_of
from pallaslab.model._jax.rewrite import contains, eval_replacing
from pallaslab.model._jax.trace import bind_eqn

STORES = ("masked_swap", "swap", "addupdate")  # pl.store / ref[...] = x / ref[...] += x
ATOMICS = ("atomic_rmw", "atomic_cas")  # programs may share elements through these by design
# Without a batching rule (a gap `vmap` cannot cross): Triton's equal-rank broadcast, the
# compiler hints and Pallas's reciprocal, evaluated as what they compute.
VALUES: dict[str, Callable[..., Any]] = {
    "broadcast_to": lambda x, shape, **_: jnp.broadcast_to(x, shape),
    "multiple_of": lambda x, **_: x, "max_contiguous": lambda x, **_: x,
    "reciprocal": lambda x, **_: 1 / x}
REPLACED = ("program_id", "num_programs", *VALUES)
# A shadow element: 0 unwritten, 1 overwritten by atomic_xchg, 2 stored (the larger wins)
EXCHANGED, STORED = 1, 2
SHADOW = jnp.int8
LANE_BUDGET = 1 << 27  # bytes per chunk of programs, counting 4 per output element
MAX_STEPS = 8  # example programs kept per out-of-range access


class NotAnalysable(Exception):
    """The body holds something the store evaluation cannot follow (said in plain words)."""


@dataclasses.dataclass(frozen=True)
class StoredElements:
    """Per output element: how many programs stored it (plain stores), the first and last of
    them, and whether any program wrote it at all."""

    count: np.ndarray  # int32, output shape
    first: np.ndarray  # int32 program step (row-major), -1 where none
    last: np.ndarray
    written: np.ndarray | None = None  # bool: stored, or overwritten by atomic_xchg
    sources: tuple[str, ...] = ()  # "path.py:LINE" of the stores into this output
    atomic_sources: tuple[str, ...] = ()  # ... and of the atomics updating it


@dataclasses.dataclass(frozen=True)
class OutOfBounds:
    """A load or store whose unmasked lanes reach outside its array in some programs."""

    operand: int  # the ref's position in the kernel body (Pallas's operand order)
    access: str  # "load", "store" or "atomic update"
    source: str | None  # "path.py:LINE"
    programs: int  # how many programs do it
    steps: tuple[int, ...]  # the first of them (row-major steps), at most MAX_STEPS
    elements: int  # lanes outside the array in the first such program (all its executions)
    first: tuple[int, ...]  # that program's first and last element outside the array
    last: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Accesses:
    stored: tuple[StoredElements, ...]  # per output
    out_of_bounds: tuple[OutOfBounds, ...]


def whole_array_kernel(eqn: Any) -> bool:
    """Does every operand's block cover its whole array at index 0 (Triton's usual style)?"""
    gm = eqn.params["grid_mapping"]
    return not gm.num_dynamic_grid_bounds and all(
        bm.has_trivial_window() for bm in gm.block_mappings)


def stored_elements(eqn: Any, operands: Sequence[Any]) -> list[StoredElements]:
    """For each output of a whole-array kernel equation bound on `operands` (scalar prefetch
    then inputs), the programs storing each element."""
    return list(evaluate_accesses(eqn, operands).stored)


def evaluate_accesses(eqn: Any, operands: Sequence[Any]) -> Accesses:
    """Every program of a whole-array kernel equation evaluated on `operands` (scalar
    prefetch then inputs): the elements it stores, and its accesses outside their arrays."""
    p = eqn.params
    gm = p["grid_mapping"]
    grid = tuple(int(g) for g in gm.grid)
    out_avals = [bm.array_aval for bm in gm.block_mappings_output]
    sites = _access_sites(p["jaxpr"])
    body, recorder = _instrumented_body(p["jaxpr"], gm, grid, sites)
    scratch = [v.aval.inner_aval for v in p["jaxpr"].invars[gm.slice_scratch_ops]]
    init = [*operands, *[jnp.zeros(a.shape, a.dtype) for a in out_avals],
            *[jnp.zeros(a.shape, a.dtype) for a in scratch],
            *[jnp.zeros(a.shape, SHADOW) for a in out_avals],
            *[jnp.zeros(_acc_size(e), jnp.int32) for e in sites]]
    n_marks = len(out_avals) + len(sites)

    def program(pid: Any) -> list[Any]:
        return jax_core.eval_jaxpr(body, body.consts, pid, *init)[len(init) - n_marks:]

    ids = np.asarray(list(itertools.product(*(range(g) for g in grid))), np.int32)
    ids = ids.reshape(max(1, math.prod(grid)), len(grid))
    out_bytes = sum(math.prod(a.shape) for a in out_avals) * 4
    lanes = max(1, min(len(ids), LANE_BUDGET // max(out_bytes, 1)))
    stored = _StoreTally([a.shape for a in out_avals])
    bounds = _BoundsTally(len(sites))
    run = _Runner(program)
    for start in range(0, len(ids), lanes):
        marks = [np.asarray(m) for m in run(jnp.asarray(ids[start:start + lanes]))]
        steps = np.arange(start, start + len(marks[0]), dtype=np.int32)
        stored.add(steps, marks[:len(out_avals)])
        bounds.add(steps, marks[len(out_avals):])
    recorder.spins.check(NotAnalysable)
    elements = tuple(dataclasses.replace(s, sources=tuple(recorder.store_sources[j]),
                                         atomic_sources=tuple(recorder.atomic_sources[j]))
                     for j, s in enumerate(stored.result()))
    return Accesses(elements, bounds.result(sites, recorder.site_operand))


class _Runner:
    """The programs `vmap`ped; where a primitive has no batching rule, one at a time
    (`lax.map`): slower, but no kernel goes unanalysed for a gap in vmap."""

    def __init__(self, program: Any) -> None:
        self.program = program
        self.run = jax.jit(jax.vmap(program))
        self.batched = True

    def __call__(self, ids: Any) -> Any:
        try:
            return self.run(ids)
        except NotImplementedError:
            if not self.batched:
                raise
            self.batched = False
            self.run = jax.jit(lambda chunk: lax.map(self.program, chunk))
            return self.run(ids)


class _StoreTally:
    """Per output element, over chunks of programs: who stored it, and whether anyone wrote."""

    def __init__(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.count = [np.zeros(s, np.int32) for s in shapes]
        self.first = [np.full(s, -1, np.int32) for s in shapes]
        self.last = [np.full(s, -1, np.int32) for s in shapes]
        self.written = [np.zeros(s, bool) for s in shapes]

    def add(self, steps: np.ndarray, marks: Sequence[np.ndarray]) -> None:
        for j, chunk in enumerate(marks):
            self.written[j] |= (chunk > 0).any(axis=0)
            m = chunk >= STORED
            at = steps.reshape(-1, *([1] * (m.ndim - 1)))
            self.count[j] += m.sum(axis=0, dtype=np.int32)
            earliest = np.where(m, at, np.iinfo(np.int32).max).min(axis=0)
            self.first[j] = np.where((self.first[j] < 0) & m.any(axis=0), earliest,
                                     self.first[j])
            self.last[j] = np.maximum(self.last[j], np.where(m, at, -1).max(axis=0))

    def result(self) -> list[StoredElements]:
        return [StoredElements(*parts) for parts in zip(
            self.count, self.first, self.last, self.written, strict=True)]


class _BoundsTally:
    """Per access site: the programs with lanes outside the array, and the first one's
    accumulator row `[count, *first, *last]`."""

    def __init__(self, n_sites: int) -> None:
        self.programs = [0] * n_sites
        self.steps: list[list[int]] = [[] for _ in range(n_sites)]
        self.example: list[np.ndarray | None] = [None] * n_sites

    def add(self, steps: np.ndarray, accs: Sequence[np.ndarray]) -> None:
        for s, acc in enumerate(accs):
            hit = np.flatnonzero(acc[:, 0] > 0)
            if not len(hit):
                continue
            self.programs[s] += len(hit)
            self.steps[s].extend(int(steps[i]) for i in hit[:MAX_STEPS - len(self.steps[s])])
            if self.example[s] is None:
                self.example[s] = acc[hit[0]]

    def result(self, sites: Sequence[Any], operand_of: dict[int, int]
               ) -> tuple[OutOfBounds, ...]:
        found = []
        for s, eqn in enumerate(sites):
            row = self.example[s]
            if row is None or id(eqn) not in operand_of:
                continue
            rank = (len(row) - 1) // 2
            found.append(OutOfBounds(
                operand_of[id(eqn)], ACCESSES[eqn.primitive.name][0], call_site_of(eqn),
                self.programs[s], tuple(self.steps[s]), int(row[0]),
                tuple(int(v) for v in row[1:1 + rank]), tuple(int(v) for v in row[1 + rank:])))
        return tuple(found)


def _access_sites(jaxpr: Any) -> list[Any]:
    """Every load / store / atomic equation of the body, at any depth, in order."""
    found = [eqn for eqn in jaxpr.eqns if eqn.primitive.name in ACCESSES]
    for eqn in jaxpr.eqns:
        for sub in traced_control_flow.subjaxprs(eqn.params):
            found += _access_sites(sub)
    return list({id(eqn): eqn for eqn in found}.values())


def _acc_size(eqn: Any) -> int:
    return 1 + 2 * len(eqn.invars[0].aval.shape)


def _instrumented(eqn: Any) -> bool:
    name = eqn.primitive.name
    return name in ACCESSES or name in ATOMICS or name in REPLACED


@dataclasses.dataclass
class _Recorder:
    """What tracing the instrumented body learns: each site's operand, each output's stores."""

    site_operand: dict[int, int]
    store_sources: list[dict[str, None]]
    atomic_sources: list[dict[str, None]]
    spins: traced_control_flow.Spins


def _instrumented_body(body: Any, gm: Any, grid: tuple[int, ...], sites: list[Any]
                       ) -> tuple[Any, _Recorder]:
    """The kernel body as a pure jaxpr `(program ids, *operand values, *shadows, *site
    accumulators) -> final values`."""
    n_out = gm.num_outputs
    recorder = _Recorder({}, [{} for _ in range(n_out)], [{} for _ in range(n_out)],
                         traced_control_flow.Spins())

    def fn(pid: Any, *refs: Any) -> list[Any]:
        n_refs = len(body.invars)
        program = _Program(pid, grid, [d for d in range(len(grid)) if d not in gm.vmapped_dims],
                           list(refs[:n_refs]), gm.num_index_operands + gm.num_inputs,
                           list(refs[n_refs:n_refs + n_out]),
                           {id(e): acc for e, acc in zip(sites, refs[n_refs + n_out:],
                                                         strict=True)}, recorder)
        program.run(body, body.consts, refs[:n_refs])
        return []

    avals = [jax_core.ShapedArray((len(grid),), jnp.int32), *[v.aval for v in body.invars],
             *[AbstractRef(jax_core.ShapedArray(bm.array_aval.shape, SHADOW))
               for bm in gm.block_mappings_output],
             *[AbstractRef(jax_core.ShapedArray((_acc_size(e),), jnp.int32)) for e in sites]]
    traced, _, consts = pe.trace_to_jaxpr_dynamic(
        lu.wrap_init(fn, debug_info=body.debug_info.with_unknown_names()), avals)
    return state_discharge.discharge_state(traced.with_consts(consts),
                                           strip_memory_space=True), recorder


@dataclasses.dataclass
class _Program:
    """Evaluates the body of one program (inside the trace of the instrumented body)."""

    pid: Any
    grid: tuple[int, ...]
    kept: list[int]  # grid dimensions `program_id` counts (vmapped ones are not)
    operands: list[Any]  # the body's refs, Pallas's order
    first_out: int
    shadows: list[Any]
    accs: dict[int, Any]  # id(site equation) -> its accumulator ref
    recorder: _Recorder

    def run(self, jaxpr: Any, consts: Any, args: Sequence[Any]) -> list[Any]:
        """Evaluate `jaxpr`, every equation through `equation` (the user's lines kept)."""
        return eval_replacing(jaxpr, consts, args, lambda eqn: True, self.equation)

    def equation(self, eqn: Any, invals: list[Any]) -> list[Any]:
        name = eqn.primitive.name
        if name == "program_id":
            return [self.pid[self.kept[eqn.params["axis"]]]]
        if name == "num_programs":
            return [jnp.int32(self.grid[self.kept[eqn.params["axis"]]])]
        if name in VALUES:
            return [VALUES[name](*invals, **eqn.params)]
        lanes = self._lanes(eqn, invals) if name in ACCESSES else None
        if name in ATOMICS:  # not stores here (and XCHG has no rule off a GPU): skipped,
            # their results (the old values) read as zeros. An exchange overwrites its
            # elements (they are written); the others add to what is there.
            if getattr(eqn.params.get("atomic_type"), "name", None) == "XCHG":
                self._mark(eqn, invals, lanes, EXCHANGED)
            else:
                self._record_site(eqn, invals[0], self.recorder.atomic_sources)
            return [jnp.zeros(v.aval.shape, v.aval.dtype) for v in eqn.outvars]
        if name == "while" or any(contains(sub, _instrumented)
                                   for sub in traced_control_flow.subjaxprs(eqn.params)):
            return self._control_flow(eqn, invals)
        outs = bind_eqn(eqn, invals, eqn.params)
        if name in STORES:
            self._record_site(eqn, invals[0], self.recorder.store_sources)
            self._mark(eqn, invals, lanes, STORED)
        return outs

    def _operand_index(self, ref: Any) -> int | None:
        return next((i for i, r in enumerate(self.operands) if r is ref), None)

    def _lanes(self, eqn: Any, invals: list[Any]) -> access_bounds.Lanes | None:
        """The access's lanes, its out-of-range ones counted (None: a ref the body made
        itself, or transforms not followed)."""
        ref, transforms, mask = access_bounds.access_parts(eqn, invals)
        index = self._operand_index(ref)
        if index is None:
            return None
        lanes = access_bounds.lanes(tuple(eqn.invars[0].aval.shape), transforms, mask)
        if lanes is not None:
            self.recorder.site_operand[id(eqn)] = index
            access_bounds.accumulate(self.accs[id(eqn)], lanes)
        return lanes

    def _output_index(self, ref: Any) -> int | None:
        index = self._operand_index(ref)
        j = -1 if index is None else index - self.first_out
        return j if 0 <= j < len(self.shadows) else None

    def _record_site(self, eqn: Any, ref: Any, sources: list[dict[str, None]]) -> None:
        j = self._output_index(ref)
        if j is not None and (site := call_site_of(eqn)):
            sources[j].setdefault(site)

    def _mark(self, eqn: Any, invals: list[Any], lanes: access_bounds.Lanes | None,
              value: int) -> None:
        """Mark the output elements a store writes in its output's shadow: from the lanes'
        own coordinates (exact, nothing clamped), else by repeating the store."""
        j = self._output_index(invals[0])
        if j is None:
            return
        shadow = self.shadows[j]
        if lanes is not None:
            lanes.mark(shadow, value)
        elif "args_tree" in eqn.params:  # masked_swap / atomic_rmw: (ref, transforms, v, mask)
            _, transforms, val, mask = eqn.params["args_tree"].unflatten(invals)
            leaves, tree = jax.tree.flatten(
                (shadow, transforms, jnp.full(val.shape, value, SHADOW), mask))
            pallas_primitives.swap_p.bind(*leaves, args_tree=tree, eviction_policy=None)
        else:  # state swap / addupdate: (ref, value, *indexer leaves)
            _, val, *rest = invals
            eqn.primitive.bind(shadow, jnp.full(val.shape, value, SHADOW), *rest, **eqn.params)

    def _control_flow(self, eqn: Any, invals: list[Any]) -> list[Any]:
        """An equation holding instrumented ones (or a `while`, bounded), re-expressed so
        that its refs stay the objects this program holds (closed over, not passed)."""
        def cannot(name: str) -> Exception:
            return NotAnalysable(f"it cannot follow loads and stores inside a `{name}`")

        return traced_control_flow.follow(eqn, invals, self.run, cannot, self.recorder.spins)


def sample_operands(eqn: Any, prefetch: Sequence[Any]) -> list[Any]:
    """Operands to evaluate stores with: the captured scalar-prefetch values, seeded inputs
    (floats normal, integers zero, booleans false). Drawn by NumPy: a JAX draw would compile
    once per operand shape, a third of a second per kernel."""
    gm = eqn.params["grid_mapping"]
    avals = [v.aval for v in eqn.invars][gm.num_dynamic_grid_bounds:]
    out = list(prefetch)
    rng = np.random.default_rng(0)
    for aval in avals[len(out):]:
        floating = jnp.issubdtype(aval.dtype, jnp.floating)
        out.append(jnp.asarray(rng.standard_normal(aval.shape, np.float32)).astype(aval.dtype)
                   if floating else jnp.zeros(aval.shape, aval.dtype))
    return out

"""The `vectorized` executor: each `pallas_call` as one compiled XLA computation on the CPU,
its body `vmap`ped over the programs that may run together and `scan`ned over the rest.

Programs are batched only where that provably gives the interpreter's results:

- the kernel is a `pallas_call` with a static grid whose block tables the tiling analysis
  built, and its body uses nothing whose effect depends on program order (DMAs, semaphores,
  atomics, debug prints, the stateful PRNG, device ids: `_jax.ORDER_DEPENDENT`);
- no input ref is written and aliased inputs are read block by block by the program that
  writes the same output block (so no program reads what another wrote);
- a batched dimension is one along which every output block changes, and each output block
  belongs to one lane only (no two batched programs, at any scan step, touch the same output
  block), so outputs are assembled exactly as the interpreter assembles them;
- with scratch, only dimensions the kernel marks "parallel" are batched: scratch then starts
  uninitialized per lane. Pallas promises nothing across parallel programs (a megacore TPU
  runs them on different cores, each with its own scratch), so a kernel reading another
  parallel program's scratch is already wrong on hardware.

A kernel whose grid has a zero dimension runs no program: its outputs keep their fill (NaN,
an integer's minimum; an aliased output its input), as the interpreter leaves them, even where
its arrays are empty (which JAX's interpreters cannot index).

What fails a rule is scanned program by program in order (still one computation, the same
results as the interpreter), or, for a rule on the body's primitives, interpreted with
`interpret=True`; `RunResult.batching` says which rule decided, per kernel (and the notes, in
words), `RunResult.ran_under` and `fallback` which interpreter ran it all, and why.

Operands whose index maps tile the array regularly (`vectorize_layout`: block index = a
program id plus a constant, or a constant, per dimension, whole blocks) are sliced and
transposed instead of gathered and scattered (never those of a scalar-prefetch kernel).

Numerics: the body's arithmetic is the interpreter's; XLA may fuse batched operations
differently, so float results can differ in the last bits (within the dtype's tolerance, as
`compare` reports) and are usually bit-equal. The computation is compiled without XLA's
excess precision (`running.compile_exact`), as the interpreters' are: allowed, XLA drops an
explicit rounding (`x.astype(jnp.bfloat16).astype(jnp.float32)`) inside a batched fusion that
the interpreter's program-by-program loop keeps; where XLA refuses the option, the run's
notes say so. jaxlib 0.12.0.1 drops such a round trip even so, so the batched body converts
to bfloat16 through `lax.reduce_precision` (`model/_jax/roundings.py`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import numpy as np

from pallaslab.analysis.tiling import Tiling, tile, tiling_unavailable_reason
from pallaslab.execute.executors import capabilities, semaphore_refusals
from pallaslab.execute.executors.choice import interpreter_for
from pallaslab.execute.executors.vectorize_layout import regular_layouts
from pallaslab.execute.protocol import ExecutorSpec, Prepared, numpy_values
from pallaslab.execute.registry import get_executor
from pallaslab.execute.result import KernelBatching, RunResult
from pallaslab.execute.worker.running import (
    cached_compile,
    compile_exact,
    computation_key,
    execute_here,
)
from pallaslab.model import Kernel, _jax
from pallaslab.model._jax import bounded_slices, hlo_bodies, vectorize, vectorize_blocks
from pallaslab.model._jax.rewrite import eval_replacing


@dataclasses.dataclass(frozen=True)
class KernelPlan:
    """How one kernel runs: batched over `batched_dims`, scanned, or interpreted (`plan` None)."""

    kernel: str
    plan: vectorize.BatchPlan | None
    reason: str | None  # why it is not (fully) batched; None when every dimension is
    no_programs: bool = False  # a zero grid dimension: nothing runs, outputs keep their fill

    @property
    def batching(self) -> KernelBatching:
        if self.no_programs:
            return KernelBatching(self.kernel, "no-programs", rule=self.reason)
        if self.plan is None:
            return KernelBatching(self.kernel, "interpreted", rule=self.reason)
        dims = tuple(self.plan.batched_dims)
        return KernelBatching(self.kernel, "batched" if dims else "scanned", dims, self.reason)

    @property
    def note(self) -> str:
        if self.no_programs:
            return f"{self.kernel}: no program ran ({self.reason}): outputs keep their fill"
        if self.plan is None:
            return f"{self.kernel}: interpreted (interpret=True): {self.reason}"
        dims = self.plan.batched_dims
        how = f"batched over grid dimension(s) {', '.join(map(str, dims))}" if dims else \
            "scanned program by program"
        return f"{self.kernel}: {how}" + (f" ({self.reason})" if self.reason else "")


def plan_kernel(kernel: Kernel) -> KernelPlan:
    """The batching that provably gives the interpreter's results for `kernel`."""
    def interpreted(why: str) -> KernelPlan:
        return KernelPlan(kernel.name, None, why)

    if kernel.kind != "pallas_call":
        return interpreted(f"{kernel.kind} kernels are not batched")
    eqn = kernel.handle.eqn
    if "shard_map" in kernel.context:  # its body is traced per shard: not re-traced here
        return interpreted("kernels inside shard_map are not batched")
    if eqn.params["jaxpr"].constvars:  # pl.run_state: refs reach the body, not operands
        return interpreted("the body closes over refs (a pallas_call inside pl.run_state)")
    if kernel.dynamic_grid_dims:
        return interpreted("the grid is dynamic")
    if bounded_slices.has_bounded_slices(eqn):
        return interpreted("a pl.BoundedSlice window: each step's block is as tall as its "
                           "window, which one batched array cannot hold")
    if kernel.programs == 0:
        grid = ", ".join(map(str, kernel.grid))
        return KernelPlan(kernel.name, vectorize.BatchPlan(()),
                          f"grid ({grid}) has a zero dimension", no_programs=True)
    if (prim := vectorize.order_dependent_primitive(eqn)) is not None:
        return interpreted(f"the body uses {prim}: only the interpreter runs it program by "
                           "program (within the time limit)")
    if written := vectorize.written_inputs(eqn):
        names = ", ".join(kernel.inputs[i].origin for i in written if i < len(kernel.inputs))
        return interpreted(f"the body writes input ref(s) {names}")
    tiling = tile(kernel)
    if tiling is None:
        reason = tiling_unavailable_reason(kernel) or "some BlockSpecs are not tabulated"
        return KernelPlan(kernel.name, vectorize.BatchPlan(()), f"no block tables: {reason}")
    if missing := [op.origin for op in kernel.blocked_operands
                   if op.origin not in tiling.operands]:
        return KernelPlan(kernel.name, vectorize.BatchPlan(()),
                          f"no block tables for {', '.join(missing)}")
    if (aliasing := _alias_reason(kernel, tiling)) is not None:
        return KernelPlan(kernel.name, vectorize.BatchPlan(()), aliasing)
    dims, why = _batchable_dims(kernel, tiling)
    scanned = [d for d in range(len(tiling.grid)) if d not in dims]
    carried = tuple(_constant_along_all(tiling.operands[op.origin].block_indices, tiling.grid,
                                        scanned) for op in kernel.outputs)
    layouts = regular_layouts(kernel, tiling)
    return KernelPlan(kernel.name, vectorize.BatchPlan(dims, carried, layouts), why)


def _alias_reason(kernel: Kernel, tiling: Tiling) -> str | None:
    for op in kernel.outputs:
        if op.aliased_with is None:
            continue
        source = tiling.operands.get(op.aliased_with)
        target = tiling.operands.get(op.origin)
        if source is None or target is None or \
                not np.array_equal(source.block_indices, target.block_indices):
            return (f"{op.origin} aliases {op.aliased_with} and reads it through other blocks "
                    "than it writes")
    return None


def _batchable_dims(kernel: Kernel, tiling: Tiling) -> tuple[tuple[int, ...], str | None]:
    grid = tiling.grid
    outputs = [tiling.operands[op.origin] for op in kernel.outputs]
    semantics = kernel.dimension_semantics or ("arbitrary",) * len(grid)
    reasons: list[str] = []
    dims = []
    ids = tiling.program_ids()
    for d, size in enumerate(grid):
        if size == 1:
            continue
        if kernel.scratch and semantics[d] != "parallel":
            reasons.append(f"dimension {d} is not \"parallel\" and the kernel has scratch")
            continue
        if any(_constant_along(out.block_indices, grid, d) for out in outputs):
            reasons.append(f"an output block is revisited along dimension {d}")
            continue
        dims.append(d)
    if dims and not all(_one_lane_per_block(out, ids, tuple(dims)) for out in outputs):
        reasons.append("output blocks are shared between batched programs")
        dims = []
    return tuple(dims), ("; ".join(reasons) or None)


def _constant_along(table: np.ndarray, grid: tuple[int, ...], d: int) -> bool:
    """Does some output block stay the same when only program id `d` changes?"""
    shaped = table.reshape(*grid, table.shape[1])
    return bool(np.any(np.all(np.diff(shaped, axis=d) == 0, axis=-1)))


def _constant_along_all(table: np.ndarray, grid: tuple[int, ...], dims: list[int]) -> bool:
    """Does every program keep the same block along all of `dims` (the scanned ones)?"""
    shaped = table.reshape(*grid, table.shape[1])
    return all(bool(np.all(np.diff(shaped, axis=d) == 0)) for d in dims if grid[d] > 1)


def _one_lane_per_block(out: Any, ids: np.ndarray, dims: tuple[int, ...]) -> bool:
    """Is each output block written by the programs of a single lane (batched-dims index)?"""
    keys, _ = out.block_key()
    lanes = np.ravel_multi_index(tuple(ids[:, d] for d in dims),
                                 tuple(int(ids[:, d].max()) + 1 for d in dims))
    pairs = np.unique(np.stack([keys.astype(np.int64), lanes.astype(np.int64)]), axis=1)
    return len(np.unique(pairs[0])) == pairs.shape[1]


def _callable(closed_jaxpr: Any, batched: dict[int, vectorize.BatchPlan], empty: set[int]
              ) -> Any:
    """The captured jaxpr with each batched kernel equation (keyed by `id(eqn)`) run batched
    and each one with no programs replaced by its unwritten outputs; wrap in `jax.jit`."""
    if not empty:
        return vectorize.vectorized_jaxpr_callable(closed_jaxpr, batched)

    def replace(eqn: Any, invals: list[Any]) -> list[Any]:
        if id(eqn) in empty:
            return vectorize_blocks.unrun_outputs(eqn, invals)
        return vectorize.run_batched(eqn, invals, batched[id(eqn)])

    def call(*args: Any) -> list[Any]:
        return eval_replacing(closed_jaxpr.jaxpr, closed_jaxpr.consts, args,
                              lambda eqn: id(eqn) in batched or id(eqn) in empty, replace)
    return call


class VectorizedExecutor:
    """Kernels as batched XLA computations on the CPU (see the module docstring)."""

    # Interpret mode's results, and its fill for what no program wrote.
    spec = ExecutorSpec(
        name="vectorized", label="interpret mode",
        description="the fast CPU executor: interpret mode's results, programs batched "
                    "where provably equivalent, else interpreted (the rule is reported)",
        integer_fill="min", mode="hlo", cpu_preferred=True, second_rank=2,
        refusal=semaphore_refusals.with_hlo_semaphore_refusal(
            capabilities.hlo_interpreter_gap))  # what it interprets, the HLO interpreter runs
    name = spec.name

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return self.spec.refusal(prepared.capture)  # what cannot be batched is interpreted

    def plans(self, prepared: Prepared) -> list[KernelPlan]:
        return [plan_kernel(k) for k in prepared.capture]

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        cap = prepared.capture
        try:
            plans = self.plans(prepared)
        except Exception as err:  # our planning broke: the interpreter still runs the kernels
            why = _own_failure("could not plan the batching", err)
            return self._interpreted(prepared, deadline,
                                     [KernelPlan(k.name, None, why) for k in cap], why)
        left = [k for k, p in zip(cap, plans, strict=True) if p.plan is None]
        if len(left) == len(plans) or capabilities.hlo_interpreter_refusal(left) is not None:
            return self._interpreted(prepared, deadline, plans)
        try:
            return self._batched(prepared, deadline, plans)
        except Exception as err:  # batching broke (a body vmap cannot batch, our own bug):
            # the interpreter runs it all and reports any fault of the kernel as its own
            return self._interpreted(prepared, deadline, plans,
                                     _own_failure("could not batch", err))

    def _batched(self, prepared: Prepared, deadline: float | None, plans: list[KernelPlan]
                 ) -> RunResult:
        """The planned kernels batched (or without programs), the others interpreted, as one
        computation; raises when that computation cannot be built or run."""
        cap = prepared.capture
        batched = {id(k.handle.eqn): p.plan for k, p in zip(cap, plans, strict=True)
                   if p.plan is not None and not p.no_programs}
        empty = {id(k.handle.eqn) for k, p in zip(cap, plans, strict=True) if p.no_programs}
        # Kernels left out are interpreted; the rewrite keeps the other equations (and ids).
        # (Their bodies rewritten as `interpret` rewrites them: Triton atomics in program
        # order, ...)
        jaxpr = _jax.rewrite_kernels(cap.handle.closed_jaxpr, lambda eqn: None if id(eqn) in
                                     batched or id(eqn) in empty else
                                     {"interpret": True, **hlo_bodies.rewritten_body(eqn)})
        flat = prepared.flat_args
        # Kept by what it computes: the capture and the plans (which scalar-prefetch values
        # may decide), so a re-run of an unchanged function skips the compile.
        (compiled, precision), compile_time = cached_compile(
            lambda: computation_key(self.name, plans, cap.handle.closed_jaxpr, flat),
            lambda: compile_exact(jax.jit(_callable(jaxpr, batched, empty)).lower(*flat)))
        notes = (*(p.note for p in plans), *((precision,) if precision else ()),
                 *hlo_bodies.run_notes(k.handle.eqn for k in cap if k.handle is not None))
        if deadline is not None and time.monotonic() > deadline:  # one computation: no
            # program boundary to stop at, so the limit is checked before it starts
            return RunResult(self.name, None, prepared.output_info, 0.0, compile_time,
                             inputs=numpy_values(flat), notes=notes,
                             batching=tuple(p.batching for p in plans),
                             timed_out=f"vectorized stopped by its time limit after "
                                       f"compiling for {compile_time:.1f} s")
        t1 = time.perf_counter()
        outs = jax.block_until_ready(compiled(*flat))
        wall = time.perf_counter() - t1
        return RunResult(self.name, numpy_values(outs), prepared.output_info, wall,
                         compile_time, inputs=numpy_values(flat), notes=notes,
                         batching=tuple(p.batching for p in plans))

    def _interpreted(self, prepared: Prepared, deadline: float | None, plans: list[KernelPlan],
                     why: str | None = None) -> RunResult:
        """Everything run by the interpreter that can run the kernels, saying why."""
        name = interpreter_for(list(prepared.capture))
        limit = float("inf") if deadline is None else max(0.0, deadline - time.monotonic())
        result = execute_here(get_executor(name), prepared, limit)  # its verdicts, as is
        reasons = [why] if why else [f"{p.kernel}: {p.reason}" for p in plans if p.plan is None]
        notes = [f"vectorized fell back to {name}: {why}"] if why else \
            [f"vectorized fell back to {name} for {p.kernel}: {p.reason}" for p in plans
             if p.plan is None]
        return dataclasses.replace(result, executor=self.name, notes=(*notes, *result.notes),
                                   ran_under=name, fallback="; ".join(reasons),
                                   batching=tuple(_interpreted_batching(p, name, why)
                                                  for p in plans))


def _own_failure(what: str, err: Exception) -> str:
    """Why vectorized handed a run to the interpreter after its own machinery raised."""
    return f"{what}: {type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"


def _interpreted_batching(plan: KernelPlan, interpreter: str, why: str | None
                          ) -> KernelBatching:
    """How a kernel ran when the whole function went to `interpreter`."""
    if plan.plan is None:
        return plan.batching
    return KernelBatching(plan.kernel, "interpreted", rule=why or (
        f"the function's other kernels run under {interpreter}, so this one does too"))


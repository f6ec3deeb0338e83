"""Findings: what the tiling tables say is wrong or worth knowing about a kernel.

Each rule is a small function of (kernel, tiling, rules) returning findings with the stable
codes of docs/architecture.md. TPU rules apply to kernels written for TPU (or that do not
say); GPU rules to kernels with Triton / Mosaic GPU compiler params, or when a GPU target is
asked for.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator

import numpy as np

from pallaslab.analysis.coverage import MAX_EXAMPLES, coverage
from pallaslab.analysis.dma_waits import CODE as UNWAITED_DMA
from pallaslab.analysis.dma_waits import unwaited_dma_findings
from pallaslab.analysis.finding import Finding, Severity
from pallaslab.analysis.output_writes import (
    lock_guarded_finding,
    lock_guards,
    only_atomic,
    revisit_any,
    unwritten_outputs,
    written_for_interpreter,
)
from pallaslab.analysis.semaphore_waits import CODE as UNSIGNALLED_WAIT
from pallaslab.analysis.semaphore_waits import unsignalled_wait_findings
from pallaslab.analysis.smem_order import SMEM_ORDER_CODES, smem_order_findings
from pallaslab.analysis.tiling import (
    OperandTiling,
    Tiling,
    over_limit_reason,
    step_chunks,
    tiling_unavailable_reason,
)
from pallaslab.analysis.tpu_operand_rules import (  # noqa: F401 - tests import them here
    TPU_OPERAND_RULES,
    tpu_block_shape,
    tpu_buffer_count,
    tpu_mixed_element,
)
from pallaslab.analysis.tpu_store_rules import tpu_masked_store_dtype
from pallaslab.model import Kernel, Operand
from pallaslab.model.source_names import short_source

HEAD_STEPS = 64 * MAX_EXAMPLES  # steps a rule keeps to pick its examples from

CODES = (
    "tpu-block-shape",
    "tpu-buffer-count",
    "tpu-mixed-element",
    "tpu-masked-store-dtype",
    "block-out-of-bounds",
    "partial-block",
    "uncovered-output",
    "unwritten-output",
    "output-revisit",
    "parallel-write-conflict",
    "lock-guarded-store",
    "out-of-bounds-access",
    "vmem-overflow",
    "vmem-spill-risk",
    "vmem-limit-above-chip",
    "no-sparse-core",
    "tiling-unavailable",
    "empty-grid",
    "structure-unread",
    *SMEM_ORDER_CODES,
    UNWAITED_DMA,
    UNSIGNALLED_WAIT,
)


@dataclasses.dataclass(frozen=True)
class Rules:
    """Which hardware's semantics the findings are judged by. `hardware` False: the kernel
    targets no hardware (written for the interpreter, no target named), so what would fail
    only on a TPU is a warning that says so."""

    tpu: bool
    gpu: bool
    hardware: bool = True

    @classmethod
    def for_kernel(cls, kernel: Kernel, backend: str | None = None) -> Rules:
        chosen = backend or kernel.backend
        hardware = backend is not None or not written_for_interpreter(kernel)
        return cls(tpu=chosen in (None, "tpu"), gpu=chosen in ("triton", "mosaic_gpu"),
                   hardware=hardware)

    def judged(self, finding: Finding) -> Finding:
        """A hardware-only finding as these rules see it: unchanged for a target, else a
        warning saying where it would fail."""
        if self.hardware or finding.severity != "error":
            return finding
        return dataclasses.replace(
            finding, severity="warning",
            message=f"on TPU: {finding.message} The kernel is written for the interpreter "
                    "(interpret=True, no compiler params) and targets no hardware, so this is "
                    "a warning here; `pallaslab check --target tpu-v5e` judges it as an error.")


def find(
    kernel: Kernel, tiling: Tiling | None, *, backend: str | None = None
) -> tuple[Finding, ...]:
    """Every finding for one kernel. `backend` ("tpu", "triton", ...) overrides the kernel's own."""
    rules = Rules.for_kernel(kernel, backend)
    found: list[Finding] = []
    if rules.tpu:
        rules_here = [r for r in TPU_OPERAND_RULES
                      if kernel.kind != "pipeline" or r is not tpu_buffer_count]
        found += [rules.judged(f) for op in kernel.blocked_operands for rule in rules_here
                  if (f := rule(op)) is not None]
        found += [rules.judged(f) for f in tpu_masked_store_dtype(kernel)]
    if kernel.programs == 0:
        found.append(empty_grid(kernel))
    found += [Finding("structure-unread", "warning", f"{kernel.name}: {note}: the analysis "
                      "and the views leave it out (a gap of pallaslab's, not of the kernel)")
              for note in kernel.structure_notes]
    found += unwritten_outputs(kernel)
    smem = smem_order_findings(kernel)  # Mosaic GPU: SMEM used before its TMA copy is done
    found += smem
    found += unwaited_dma_findings(kernel, smem)  # a copy started and never waited
    found += unsignalled_wait_findings(kernel)  # a wait nothing can ever end
    if tiling is None:
        reason = tiling_unavailable_reason(kernel)
        if reason and kernel.kind == "pallas_call":
            # Over the limit, the whole-grid rules went unchecked: not a clean bill of health.
            severity: Severity = "warning" if over_limit_reason(kernel) else "info"
            found.append(Finding("tiling-unavailable", severity, f"{kernel.name}: {reason}."))
        return tuple(found)
    for rule in RULES:
        found.extend(rule(kernel, tiling, rules))
    return tuple(found)


def empty_grid(kernel: Kernel) -> Finding:
    """A grid with a zero dimension: the body never runs (unwritten outputs are reported by
    `uncovered-output`, per operand)."""
    grid = ", ".join(str(g) for g in kernel.grid) + ("," if len(kernel.grid) == 1 else "")
    return Finding(
        "empty-grid", "info",
        f"{kernel.name}: grid ({grid}) has no programs: the kernel body never runs, no block "
        "is fetched and its outputs are never written.",
    )


# --- whole-grid rules ------------------------------------------------------------------------


def _examples(tiling: Tiling, steps: np.ndarray) -> tuple[tuple[int, ...], ...]:
    return tuple(tiling.programs_at(steps, MAX_EXAMPLES))


def _blocks(ot: OperandTiling, steps: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """The first few distinct blocks of the operand at these steps, in step order."""
    rows = ot.block_indices[np.asarray(steps)[: 64 * MAX_EXAMPLES]]
    _, first = np.unique(rows, axis=0, return_index=True)
    return tuple(tuple(int(v) for v in rows[i]) for i in np.sort(first)[:MAX_EXAMPLES])


def out_of_bounds(kernel: Kernel, tiling: Tiling, rules: Rules) -> Iterator[Finding]:
    """Blocks lying wholly outside their array (or starting before it)."""
    for ot in tiling.operands.values():
        op = kernel.operand(ot.origin)
        # (a window sliced in place copies nothing, but slices its ref all the same)
        if not (ot.windowed or op.in_place) or not len(ot.block_indices):
            continue
        bad = _outside(ot, op)
        steps = np.flatnonzero(bad)
        if steps.size:
            blocks = _blocks(ot, steps)
            yield Finding(
                "block-out-of-bounds", "error",
                f"{ot.origin}: {steps.size} program(s) use a block outside the array "
                f"{ot.shape} (block shape {op.block_shape}); e.g. program "
                f"{tiling.program_at(int(steps[0]))} gets block index {blocks[0]}, which starts "
                f"at element {tuple(int(s) for s in ot.starts_at(steps[:1])[0])}. "
                "Rule: every block must start inside its array.",
                operand=ot.origin, programs=_examples(tiling, steps), blocks=blocks,
            )


def _outside(ot: OperandTiling, op: Operand) -> np.ndarray:
    """(P,) bool: the step's block starts outside the array (Element windows: ends outside;
    BoundedSlice windows: ends outside or is longer than its bound)."""
    bad = np.zeros(len(ot.block_indices), bool)
    for d, (dim, size) in enumerate(zip(op.block_dims or (), ot.shape, strict=True)):
        idx = ot.block_indices[:, d]
        if dim.kind == "bounded":  # start in elements; in place, the whole bound is sliced
            length = ot.sizes[:, d].astype(np.int64) if ot.sizes is not None else dim.size
            bad |= (idx < 0) | (idx + length > size) | (length > dim.size) | (length < 0)
        elif dim.kind == "element":
            lo, hi = -dim.padding[0], size + dim.padding[1]
            start = idx.astype(np.int64) - dim.padding[0]
            bad |= (start < lo) | (start + dim.size > hi)
        else:  # blocked / squeezed: an index past the last (partial) block is outside
            bad |= (idx < 0) | (idx >= -(-size // max(dim.size, 1)))
    return bad


def partial_blocks(kernel: Kernel, tiling: Tiling, rules: Rules) -> Iterator[Finding]:
    """Blocks that overhang the end of their array. Pallas pads an overhanging block's reads
    and drops its writes past the edge, so only padding that can reach an output element
    inside its array is a hazard (a warning); everything else is said as what happens (info)."""
    edges = _output_edges(kernel, tiling)
    for ot in tiling.operands.values():
        op = kernel.operand(ot.origin)
        uneven = _uneven_dims(op)
        if not uneven or not len(ot.block_indices):
            continue
        hangs, edge = _hanging_steps(ot, uneven)
        inside = ~_outside(ot, op)
        steps = np.flatnonzero(hangs & inside)
        # An input read at its array's edge by a program that writes some output block lying
        # inside its array: the padding can leak into elements the output keeps.
        leaks = (np.flatnonzero(edge & inside & ~edges) if ot.role == "input"
                 else np.zeros(0, np.int64))
        where = (f"the last block of `{ot.origin}` overhangs its {ot.shape} array by "
                 f"{_overhang_words(uneven, len(ot.shape))} (block {op.block_shape})")
        if leaks.size:
            yield Finding(
                "partial-block", "warning",
                f"{ot.origin}: {where}: Pallas pads its reads there with unspecified values, "
                f"and {leaks.size} program(s) read that edge block while writing output "
                f"blocks inside their arrays, where the padding can leak; e.g. program "
                f"{tiling.program_at(int(leaks[0]))}. Mask the edge (e.g. with pl.program_id "
                "and jnp.where) or pad the array.",
                operand=ot.origin, programs=_examples(tiling, leaks), blocks=_blocks(ot, leaks))
            continue
        yield Finding(
            "partial-block", "info",
            f"{ot.origin}: {where}: Pallas pads its reads "
            + ("and drops its writes there" if ot.role != "input"
               else "there, and the programs that read it write only output blocks that "
               "overhang too, whose writes past the edge are dropped" if edge.any()
               else "there (one block wider than the whole array: the usual lane alignment)")
            + f"; {steps.size} program(s) get that edge block.",
            operand=ot.origin, programs=_examples(tiling, steps), blocks=_blocks(ot, steps))


def _uneven_dims(op: Operand) -> list[tuple[int, int, int]]:
    """(dim, block size, array size) of the blocked dims the block does not divide."""
    return [(i, d.size, s) for i, (d, s) in enumerate(zip(op.block_dims or (), op.shape,
                                                          strict=True))
            if d.kind == "blocked" and s % d.size]


def _hanging_steps(ot: OperandTiling, uneven: list[tuple[int, int, int]]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(P,) bool twice: the step's block overhangs the array; it does so at a real edge (a dim
    with several blocks, not one block wider than the whole array, as lane alignment asks)."""
    hangs = np.zeros(len(ot.block_indices), bool)
    edge = np.zeros(len(ot.block_indices), bool)
    for i, b, s in uneven:
        last = ot.block_indices[:, i] == s // b
        hangs |= last
        if s > b:
            edge |= last
    return hangs, edge


def _output_edges(kernel: Kernel, tiling: Tiling) -> np.ndarray:
    """(P,) bool: every output block this step writes overhangs its array at a real edge, so
    what it computes from padding is dropped (False everywhere: no windowed output)."""
    outs = [ot for ot in tiling.operands.values()
            if ot.role == "output" and ot.windowed and len(ot.block_indices)]
    edges = np.ones(tiling.programs, bool) if outs else np.zeros(tiling.programs, bool)
    for ot in outs:
        edges &= _hanging_steps(ot, _uneven_dims(kernel.operand(ot.origin)))[1]
    return edges


def _overhang_words(uneven: list[tuple[int, int, int]], ndim: int) -> str:
    """"127 columns", "8 rows and 56 columns": the elements past the edge, per dim."""
    words = []
    for i, b, s in uneven:
        n = -(-s // b) * b - s
        unit = ("elements" if ndim == 1 else "columns" if i == ndim - 1
                else "rows" if i == ndim - 2 else f"elements along dim {i}")
        words.append(f"{n} {unit}")
    return " and ".join(words)


def uncovered_outputs(kernel: Kernel, tiling: Tiling, rules: Rules) -> Iterator[Finding]:
    """Output elements that no program writes."""
    for ot in tiling.operands.values():
        if ot.role != "output" or not ot.windowed:
            continue
        op = kernel.operand(ot.origin)
        cover = coverage(ot, op)
        if not cover.missing:
            continue
        # A nested pipeline writes into a ref its kernel owns: what it leaves keeps the
        # kernel's own values, as an aliased output keeps its input's.
        nested = kernel.kind == "pipeline"
        aliased = op.aliased_with is not None or nested
        tail = (f"they keep what the kernel left in {op.outer or ot.origin}" if nested
                else f"they keep the values of the aliased input {op.aliased_with}" if aliased
                else "they hold whatever was in memory (garbage on TPU/GPU)")
        if op.selected_after and not aliased:
            tail += (f", but every use of the output goes through a select (jnp.where) at "
                     f"{short_source(op.selected_after)}: harmless if its mask drops "
                     "exactly these elements (as libraries that leave rows unwritten on "
                     "purpose do)")
        none = " (the grid has none)" if not tiling.programs else ""
        # A nested pipeline leaving part of the kernel's own output to "what the kernel left"
        # is suspect (the run's unwritten-output finding tells); part of a scratch buffer is not
        severity: Severity = (
            ("warning" if op.selected_after else "error") if not aliased
            else "warning" if nested and (op.outer or "").startswith("outputs") else "info")
        yield Finding(
            "uncovered-output", severity,
            f"{ot.origin}: {cover.missing} of {cover.total} elements "
            f"({100 * cover.missing / cover.total:.1f}%) are never written by any "
            f"program{none}, "
            f"starting at element {cover.first_missing}; {tail}."
            + ("" if nested else " Rule: the output BlockSpecs over the grid must cover the "
               "whole output."),
            operand=ot.origin, blocks=cover.missing_blocks,
        )


def output_revisits(kernel: Kernel, tiling: Tiling, rules: Rules) -> Iterator[Finding]:
    """An output block written in non-consecutive steps: its later write-back clobbers the first."""
    if not rules.tpu:
        return
    # RevisitMode.ANY: Mosaic re-reads the block from HBM on a revisit, so any order is safe.
    anywhere = revisit_any(kernel)
    for ot in tiling.operands.values():
        if ot.role != "output" or not ot.windowed or ot.origin in anywhere:
            continue
        keys, nkeys = ot.block_key()
        count, steps = revisited_runs(keys, nkeys, ot.fetch_mask)
        if not count:
            continue
        blocks = _blocks(ot, steps)
        yield rules.judged(Finding(
            "output-revisit", "error",
            f"{ot.origin}: {count} output block visit(s) are not consecutive; e.g. block "
            f"{blocks[0]} is left and written back, then revisited at program "
            f"{tiling.program_at(int(steps[0]))}. On TPU the output buffer is not re-read from "
            "HBM on a revisit, so the later write-back clobbers the earlier result. Rule: visit "
            "each output block in one run of consecutive steps (put reduction axes last), "
            "or let it be revisited anywhere with pl.Buffered(1, "
            "revisit=pl.RevisitMode.ANY).",
            operand=ot.origin, programs=_examples(tiling, steps), blocks=blocks,
        ))


def revisited_runs(keys: np.ndarray, nkeys: int, fetch_mask: np.ndarray
                   ) -> tuple[int, np.ndarray]:
    """(how many, the first HEAD_STEPS) steps starting a run of a block that already had an
    earlier run. O(P) over chunks of steps: one byte per key plus chunk-sized temporaries."""
    seen = np.zeros(nkeys, bool)
    count = 0
    head: list[int] = []
    for start, stop in step_chunks(len(keys)):
        run_starts = start + np.flatnonzero(fetch_mask[start:stop])
        run_keys = keys[run_starts]
        again = np.ones(len(run_keys), bool)
        again[np.unique(run_keys, return_index=True)[1]] = False  # repeats within the chunk
        again |= seen[run_keys]  # or blocks visited in an earlier chunk
        seen[run_keys] = True
        steps = run_starts[again]
        count += len(steps)
        if len(head) < HEAD_STEPS:
            head.extend(steps[: HEAD_STEPS - len(head)].tolist())
    return count, np.asarray(head, np.int64)


def parallel_write_conflicts(kernel: Kernel, tiling: Tiling, rules: Rules) -> Iterator[Finding]:
    """Programs that may run concurrently writing the same output block. A GPU kernel on
    whole-array refs is judged by the elements its loads and stores reach (`gpu_stores`:
    write conflicts, accesses outside the arrays, output no program stores), whatever its
    grid, one program included."""
    if rules.gpu:
        from pallaslab.analysis import gpu_stores

        if gpu_stores.decides_by_stores(kernel):
            yield from gpu_stores.store_findings(kernel, tiling)
            return
    concurrent = concurrent_dims(kernel, len(tiling.grid), rules)
    rule = ("programs that differ along a parallel dimension must write different output "
            "blocks (mark reduction dimensions \"arbitrary\")")
    if rules.gpu:
        why = "on GPU every program may run concurrently"
        rule = ("programs must write different output blocks, or combine into a shared one "
                "with atomics only (plt.atomic_add, plt.atomic_max, ...)")
    else:
        why = "grid dimension(s) {} are marked \"parallel\"".format(
            ", ".join(str(d) for d in concurrent))
    if not concurrent:
        return
    guarded = lock_guards(kernel) if rules.gpu else {}  # TPU has no spin locks
    for ot in tiling.operands.values():
        # An output left in HBM/ANY is written by the body's own DMAs (or nested pipelines),
        # not through its window: the window says nothing of which elements a program writes
        # (tpu-interpret's race detector sees the real writes).
        if ot.role != "output" or not ot.windowed:
            continue
        if only_atomic(kernel, ot.origin):  # atomic read-modify-writes combine, never race
            continue
        keys, nkeys = ot.block_key()
        steps = _conflicting_steps(keys, nkeys, tiling.grid, concurrent)
        if steps is None:
            continue
        blocks = _blocks(ot, steps)
        if ot.origin in guarded:  # the programs store in turn, holding the lock
            yield lock_guarded_finding(
                kernel, kernel.operand(ot.origin), guarded[ot.origin],
                f"programs {', '.join(str(p) for p in _examples(tiling, steps)[:3])} all "
                f"write output block {blocks[0]}")
            continue
        yield Finding(
            "parallel-write-conflict", "error",
            f"{ot.origin}: programs {', '.join(str(p) for p in _examples(tiling, steps)[:3])} "
            f"all write output block {blocks[0]}, and {why}: they race. Rule: {rule}.",
            operand=ot.origin, programs=_examples(tiling, steps), blocks=blocks,
        )


def concurrent_dims(kernel: Kernel, rank: int, rules: Rules) -> list[int]:
    """Grid dimensions whose programs may run concurrently: every one on GPU, the "parallel"
    ones on TPU. Programs differing along them are separate writers of an output block even
    in consecutive steps; along the others, consecutive revisits are one write-back."""
    if rules.gpu:
        return list(range(rank))
    semantics = kernel.dimension_semantics or ("arbitrary",) * rank
    return [d for d, s in enumerate(semantics) if s in ("parallel", "core_parallel")]


def write_back_mask(ot: OperandTiling) -> np.ndarray:
    """(P,) bool: an output block is written back to HBM after this step (TPU pipeline): the
    last step of each run of consecutive steps on the same block. Inputs: `fetch_mask`."""
    if ot.role != "output":
        return ot.fetch_mask
    mask = np.empty_like(ot.fetch_mask)
    mask[:-1] = ot.fetch_mask[1:]  # the next step starts another block
    mask[-1:] = True  # the grid ends
    return mask


def coordinate_key(grid: tuple[int, ...], dims: list[int], start: int = 0,
                   stop: int | None = None) -> np.ndarray:
    """(stop - start,) int64 for steps [start, stop) in execution order: each program's
    coordinates along `dims`, ravelled (equal keys: equal coordinates)."""
    steps = np.arange(start, math.prod(grid) if stop is None else stop, dtype=np.int64)
    key = np.zeros(len(steps), np.int64)
    along = np.empty_like(steps)
    for d in dims:  # in place: three chunk-sized arrays whatever the rank
        np.floor_divide(steps, math.prod(grid[d + 1:]), out=along)
        np.remainder(along, grid[d], out=along)
        key *= grid[d]
        key += along
    return key


def _conflicting_steps(keys: np.ndarray, nkeys: int, grid: tuple[int, ...],
                       concurrent: list[int]) -> np.ndarray | None:
    """Steps of the first output block written by programs differing in their concurrent
    coordinates, or None. Chunk by chunk: each step is compared with its block's first
    writer, recorded when the block first appears."""
    first_sub = np.full(nkeys, -1, np.int64)
    for start, stop in step_chunks(len(keys)):
        sub = coordinate_key(grid, concurrent, start, stop)
        chunk = keys[start:stop]
        new = np.flatnonzero(first_sub[chunk] < 0)
        new_keys, first = np.unique(chunk[new], return_index=True)
        first_sub[new_keys] = sub[new[first]]
        differs = np.flatnonzero(first_sub[chunk] != sub)
        if differs.size:
            return np.flatnonzero(keys == chunk[differs[0]])
    return None


RULES: tuple[Callable[[Kernel, Tiling, Rules], Iterator[Finding]], ...] = (
    out_of_bounds,
    partial_blocks,
    uncovered_outputs,
    output_revisits,
    parallel_write_conflicts,
)

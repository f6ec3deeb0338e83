"""Index-map blame by dependence: which input blocks the reference's mismatched output block
depends on, against the input blocks the programs that wrote it read (their index maps).

The reference's dependence comes from reverse-mode derivatives: one vector-Jacobian product
per mismatched output block, its cotangent the block's indicator, gives every float input's
gradient at once; an input block the output block depends on has a nonzero gradient there
(random inputs make an exact cancellation vanishingly unlikely). Integer and boolean inputs
have no derivative and are not judged. At most `MAX_BLOCKS` mismatched blocks are examined
per output (the message says so when more mismatched).

An input is blamed only when the reference needs a block no writing program read: reading
more than needed (a causal kernel visiting masked blocks) is no fault. When every windowed
input is blamed for a block, and other programs read exactly what that block needs, the
output's own index map may have sent their result elsewhere: with several inputs agreeing
the output is blamed; with one input (the two explanations fit the values equally) the map
that does not follow the grid's order (`in_grid_order`: `(3 - i, 0)`, `(j, i)`) is.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pallaslab.analysis.tiling import OperandTiling, Tiling
from pallaslab.execute.causes.cause import Cause
from pallaslab.execute.causes.text import (
    block_set_text,
    index_map_text,
    listed,
    operand_label,
    possessive,
)
from pallaslab.model import Kernel, Operand
from pallaslab.model._jax import ElementTrace, InputTrace
from pallaslab.model.source_names import short_source

MAX_BLOCKS = 4  # mismatched output blocks examined per output (one reference VJP each)
MAX_PROGRAMS_NAMED = 4
MAX_READER_SCAN = 1 << 16  # programs scanned for the readers of a block (output blame)
Block = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Needs:
    """Per mismatched output block: per judged input origin, the input blocks it depends on."""

    blocks: dict[Block, dict[str, frozenset[Block]]]
    capped: int  # mismatched blocks not examined (over MAX_BLOCKS)


def index_map_causes(kernel: Kernel, tiling: Tiling, out_origin: str,
                     mismatched: Sequence[Block], reference: Callable[..., Any],
                     args: tuple[Any, ...], kwargs: dict[str, Any], output: int,
                     positions: dict[str, int], trace: ElementTrace | None = None,
                     traced: dict[str, InputTrace] | None = None) -> tuple[Cause, ...]:
    """The index-map causes of one output's mismatched blocks (empty when the reads agree
    with the reference's dependence, or nothing can be judged). `trace`: the function
    output is a wrapper's view of the kernel output (the reference returns that view);
    `traced`: kernel inputs a wrapper made from an argument (transposed, reshaped, ...),
    judged through the argument elements they hold."""
    traced = {o: t for o, t in (traced or {}).items() if o not in positions}
    positions = {**{o: t.argument for o, t in traced.items()}, **positions}
    ot = tiling.operands.get(out_origin)
    inputs = [op for op in kernel.inputs if _judged(op, tiling, positions)]
    if ot is None or not inputs or not mismatched:
        return ()
    needs = reference_needs(reference, args, kwargs, output, ot, mismatched,
                            {op.origin: (positions[op.origin], tiling.operands[op.origin])
                             for op in inputs}, trace, traced)
    if needs is None:
        return ()
    causes: list[Cause] = []
    for block, per_input in needs.blocks.items():
        causes += _block_causes(kernel, tiling, ot, block, per_input, inputs)
    merged = _merge(causes)
    if merged and needs.capped:
        last = merged[-1]
        merged[-1] = dataclasses.replace(last, message=(
            f"{last.message} (only the first {MAX_BLOCKS} mismatched blocks were examined; "
            f"{needs.capped} more were not)"))
    return tuple(merged)


def _judged(op: Operand, tiling: Tiling, positions: dict[str, int]) -> bool:
    """An input whose blocks can be told apart: windowed, tiled, a float argument as given."""
    ot = tiling.operands.get(op.origin)
    return (ot is not None and op.origin in positions and not op.scalar_prefetch
            and op.block_dims is not None
            and all(d.kind in ("blocked", "squeezed") for d in op.block_dims)
            and jnp.issubdtype(op.dtype, jnp.floating))


def reference_needs(reference: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any], output: int, ot: OperandTiling,
                    mismatched: Sequence[Block],
                    inputs: dict[str, tuple[int, OperandTiling]],
                    trace: ElementTrace | None = None,
                    traced: dict[str, InputTrace] | None = None) -> Needs | None:
    """The input blocks the reference's output blocks depend on (None: the reference cannot
    be differentiated, or its outputs do not line up with the kernel's). Through a wrapper
    (`trace`), a kernel block's cotangent sits on the function output's elements it became;
    an input a wrapper made (`traced`) needs the blocks holding argument elements that do."""
    leaves, tree = jax.tree.flatten((args, kwargs))
    wanted = sorted({pos for pos, _ in inputs.values()})

    def of_inputs(*xs: Any) -> Any:
        full = list(leaves)
        for pos, x in zip(wanted, xs, strict=True):
            full[pos] = x
        a, k = jax.tree.unflatten(tree, full)
        return jax.tree.leaves(reference(*a, **k))[output].astype(jnp.float32)

    xs = [jnp.asarray(leaves[p]) for p in wanted]
    examined = list(mismatched)[:MAX_BLOCKS]
    indicators = [_indicator(ot, b) for b in examined]
    if trace is not None:
        indicators = [trace.to_output(m, False) for m in indicators]
    cotangents = jnp.asarray(np.stack(indicators), jnp.float32)
    shape = tuple(ot.shape) if trace is None else tuple(trace.ids.shape)
    grads = _pullbacks(of_inputs, xs, cotangents, shape)
    if grads is None:
        return None
    result: dict[Block, dict[str, frozenset[Block]]] = {}
    for n, block in enumerate(examined):
        result[block] = {origin: _nonzero_blocks(_at_input(
            np.asarray(grads[wanted.index(pos)][n]), (traced or {}).get(origin)), it)
            for origin, (pos, it) in inputs.items()}
    return Needs(result, max(0, len(mismatched) - MAX_BLOCKS))


def _at_input(grad: np.ndarray, trace: InputTrace | None) -> np.ndarray:
    """An argument's gradient at the kernel input's elements (0 where none is held)."""
    return grad if trace is None else trace.from_argument(grad, 0)


def _pullbacks(of_inputs: Callable[..., Any], xs: list[Any], cotangents: Any,
               shape: tuple[int, ...]) -> list[Any] | None:
    """Each cotangent's gradient per input: one jitted forward pass and a batch of pullbacks;
    a reference that does not trace runs eagerly. None: it cannot be differentiated, or its
    output is not the kernel output's shape."""
    def batched(cts: Any, *args: Any) -> Any:
        _, pull = jax.vjp(of_inputs, *args)
        return jax.vmap(pull)(cts)

    try:
        if tuple(jax.eval_shape(of_inputs, *xs).shape) != shape:
            return None
        return list(jax.jit(batched)(cotangents, *xs))
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
            jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError):
        pass  # a reference with Python control flow on values: differentiated eagerly below
    try:
        out, pull = jax.vjp(of_inputs, *xs)
        if tuple(out.shape) != shape:
            return None
        return list(jax.vmap(pull)(cotangents))
    except Exception:  # a reference JAX cannot differentiate: nothing to judge by
        return None


def _indicator(ot: OperandTiling, block: Block) -> np.ndarray:
    mask = np.zeros(ot.shape, bool)
    mask[_region(ot, block)] = True
    return mask


def _region(ot: OperandTiling, block: Block) -> tuple[slice, ...]:
    start = np.asarray(block, np.int64) * np.asarray(ot.scale) - np.asarray(ot.offset)
    lo = np.clip(start, 0, ot.shape)
    hi = np.clip(start + np.asarray(ot.extent), 0, ot.shape)
    return tuple(slice(int(a), int(b)) for a, b in zip(lo, hi, strict=True))


def _nonzero_blocks(grad: np.ndarray, it: OperandTiling) -> frozenset[Block]:
    """The block indices (in the operand's index-map units) holding a nonzero gradient: the
    array padded to whole blocks (its element padding in front), reduced block by block."""
    scale = [max(int(c), 1) for c in it.scale]
    nonzero = np.pad(grad != 0, [(int(o), int(-(s + o) % c)) for s, o, c in
                                 zip(grad.shape, it.offset, scale, strict=True)])
    split = [x for n, c in zip(nonzero.shape, scale, strict=True) for x in (n // c, c)]
    blocks = nonzero.reshape(split).any(axis=tuple(range(1, 2 * len(scale), 2)))
    return frozenset(tuple(int(v) for v in row) for row in np.argwhere(blocks))


def _block_counts(it: OperandTiling) -> list[int]:
    scale = np.maximum(np.asarray(it.scale, np.int64), 1)
    return [int(-(-s // c)) for s, c in zip(it.shape, scale, strict=True)]


def _block_causes(kernel: Kernel, tiling: Tiling, ot: OperandTiling, block: Block,
                  needs: dict[str, frozenset[Block]], inputs: Sequence[Operand]
                  ) -> list[Cause]:
    writers = ot.steps_with_block(block)
    fed = _feeding_steps(kernel, tiling, writers)
    blamed = []
    for op in inputs:
        it = tiling.operands[op.origin]
        read = frozenset(tuple(int(v) for v in row)
                         for row in np.unique(it.block_indices[fed], axis=0)) \
            if len(fed) else frozenset()
        need = needs[op.origin]
        if need and not need <= read:
            blamed.append((op, it, read, need))
    if not blamed:
        return []
    programs = tuple(tiling.programs_at(writers, MAX_PROGRAMS_NAMED))
    if len(blamed) == 1 < len(inputs):  # one input: its map, or the output's moved the result
        op = blamed[0][0]
        moved = _output_blame(kernel, tiling, ot, block, needs, inputs)
        if moved is not None and _follows_order(tiling, tiling.operands[op.origin]) \
                and not _follows_order(tiling, ot):
            return [_with_inputs_right(moved, [op], False)]
    if len(blamed) < len(inputs):  # the other inputs read right: the output's map is too
        return [_input_cause(kernel, ot, block, op, it, read, need, programs)
                for op, it, read, need in blamed]
    # Every input read other blocks than the reference needs: either each input's map is
    # wrong, or the output's map sent the result of the programs that read the right blocks
    # elsewhere. Several inputs agreeing on those programs is evidence for the output; with
    # one input the two are told apart by which map follows the grid's order.
    moved = _output_blame(kernel, tiling, ot, block, needs, inputs)
    ordered = [in_grid_order(tiling, tiling.operands[op.origin]) for op in inputs]
    out_ordered = in_grid_order(tiling, ot)
    if moved is not None and (len(inputs) > 1 or (all(ordered) and not out_ordered)):
        return [_with_inputs_right(moved, inputs, len(inputs) > 1)]
    either = len(inputs) == 1 and moved is not None and out_ordered == all(ordered)
    return [_input_cause(kernel, ot, block, op, it, read, need, programs, either,
                         right=None if either or moved is None else _operand(kernel, ot.origin))
            for op, it, read, need in blamed]


def _feeding_steps(kernel: Kernel, tiling: Tiling, writers: np.ndarray) -> np.ndarray:
    """The programs whose reads can reach a block: its writers and, where scratch carries
    values between programs (an online softmax's running max), every program before the
    last writer on the same parallel coordinates. A value bug in such a body is no index
    map's fault when those programs read what the block needs."""
    if not kernel.scratch or not len(writers):
        return writers
    ids = tiling.program_ids()
    semantics = kernel.dimension_semantics or ()
    parallel = [a for a, sem in enumerate(semantics) if "parallel" in str(sem).lower()]
    before = np.arange(len(ids)) <= int(np.max(writers))
    lanes = {tuple(r) for r in ids[writers][:, parallel].tolist()}
    same = np.array([tuple(r) in lanes for r in ids[:, parallel].tolist()], bool)
    return np.union1d(writers, np.flatnonzero(before & same))


def in_grid_order(tiling: Tiling, it: OperandTiling) -> bool:
    """Whether an index map is a plain projection of the program ids, in the grid's axis
    order (`lambda i, j: (i, 0, j)`): how an output's map is written when nothing moves its
    blocks, and what a map such as `(j, i)` or `(3 - i, 0)` is not."""
    ids = tiling.program_ids()
    axes = []
    for column in np.asarray(it.block_indices).T:
        if len(np.unique(column)) == 1:
            continue  # a constant block coordinate
        axis = next((a for a in range(ids.shape[1]) if np.array_equal(column, ids[:, a])), None)
        if axis is None:
            return False
        axes.append(axis)
    return axes == sorted(set(axes))


def _follows_order(tiling: Tiling, it: OperandTiling) -> bool:
    """In the grid's order, or its blocks never going back (in row-major order) as programs
    run (a library's `(h, grid_idx // kv_steps, 0)`): what a map reversing its blocks is not."""
    rows = [tuple(int(v) for v in r) for r in np.asarray(it.block_indices)]
    return in_grid_order(tiling, it) or all(a <= b for a, b in itertools.pairwise(rows))


def _with_inputs_right(moved: Cause, inputs: Sequence[Operand], agree: bool) -> Cause:
    """The output blamed, saying why the inputs' maps are taken as right."""
    if agree:
        names = " and ".join(op.origin for op in inputs)
        why = (f"the maps of {names} are right: they agree, the programs named read exactly "
               "what the block needs")
    else:
        op = inputs[0]
        why = (f"{possessive(op.origin)} {index_map_text(op)} is right: it follows the "
               "grid's order and the output's does not")
    return dataclasses.replace(moved, message=f"{moved.message} ({why})")


def _input_cause(kernel: Kernel, ot: OperandTiling, block: Block, op: Operand,
                 it: OperandTiling, read: frozenset[Block], need: frozenset[Block],
                 programs: tuple[Block, ...], either: bool = False,
                 right: Operand | None = None) -> Cause:
    out = _operand(kernel, ot.origin)
    counts = _block_counts(it)
    hint = guess(read, need)
    who = (f"the programs that wrote it read {op.origin} blocks {block_set_text(read, counts)}"
           if read else "no program wrote it")
    message = (f"{operand_label(out) if out else ot.origin} block {block}: the reference needs "
               f"{op.origin} blocks {block_set_text(need, counts)}; {who}: {possessive(op.origin)} "
               f"{index_map_text(op)}{hint}"
               + (f" (or {possessive(ot.origin)} index map sends the result to the wrong block)"
                  if either else "")
               + (f" ({possessive(ot.origin)} {index_map_text(right)} is right: it follows "
                  "the grid's order and this one does not)" if right is not None else ""))
    return Cause("index-map", operand_label(op), short_source(op.index_map_source), programs,
                 message)


def _output_blame(kernel: Kernel, tiling: Tiling, ot: OperandTiling, block: Block,
                  needs: dict[str, frozenset[Block]], inputs: Sequence[Operand]
                  ) -> Cause | None:
    """The programs that read exactly what `block` needs wrote another output block."""
    if tiling.programs > MAX_READER_SCAN:
        return None
    readers = np.ones(tiling.programs, bool)
    for op in inputs:
        rows = tiling.operands[op.origin].block_indices
        need = needs[op.origin]
        readers &= np.array([tuple(int(v) for v in r) in need for r in rows], bool)
    steps = np.flatnonzero(readers)
    if not len(steps):
        return None
    wrote = sorted({tuple(int(v) for v in ot.block_indices[s]) for s in steps})
    if block in wrote:
        return None
    out = _operand(kernel, ot.origin)
    if out is None:
        return None
    hint = guess(frozenset(wrote), frozenset({block}))
    programs = tuple(tiling.programs_at(steps, MAX_PROGRAMS_NAMED))
    message = (f"{operand_label(out)} block {block}: the programs that read what it needs "
               f"({listed(programs)}) wrote {ot.origin} block(s) {listed(wrote)} instead: "
               f"{possessive(ot.origin)} {index_map_text(out)}{hint}")
    return Cause("index-map", operand_label(out), short_source(out.index_map_source),
                 programs, message)


def guess(read: frozenset[Block], need: frozenset[Block]) -> str:
    """" looks transposed" / " looks off by one" where the read set is the needed set with
    coordinates swapped / shifted by one."""
    if not read or not need or len(read) != len(need):
        return ""
    rank = len(next(iter(need)))
    for a in range(rank):
        for b in range(a + 1, rank):
            swapped = {_swap(n, a, b) for n in need}
            if swapped == read:
                return " looks transposed"
    for d in range(rank):
        for delta in (1, -1):
            if {tuple(v + delta if i == d else v for i, v in enumerate(n))
                    for n in need} == read:
                return " looks off by one"
    return ""


def _swap(block: Block, a: int, b: int) -> Block:
    out = list(block)
    out[a], out[b] = out[b], out[a]
    return tuple(out)


def _operand(kernel: Kernel, origin: str) -> Operand | None:
    return next((op for op in kernel.operands if op.origin == origin), None)


def _merge(causes: list[Cause]) -> list[Cause]:
    """One cause per operand: its first block's message, the others counted."""
    by_operand: dict[str | None, list[Cause]] = {}
    for c in causes:
        by_operand.setdefault(c.operand, []).append(c)
    merged = []
    for group in by_operand.values():
        first = group[0]
        extra = len(group) - 1
        merged.append(first if not extra else dataclasses.replace(
            first, message=f"{first.message} (and {extra} more mismatched block(s) alike)"))
    return merged

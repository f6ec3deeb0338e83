"""GPU findings decided from the elements programs really load and store.

Triton kernels usually take whole-array refs and load and store through masked `pl.ds`
windows, so every program's BlockSpec window is the whole array: the window rules would call
every such kernel racy, and can see neither a missing mask nor an unwritten element. For those
kernels each program's loads and stores are evaluated (masks included; the scalar-prefetch
values captured, other inputs seeded), giving

- `out-of-bounds-access`: unmasked lanes reaching outside their array (JAX's interpreters
  clamp them, so outputs can look right; on a GPU they are illegal addresses);
- `parallel-write-conflict`: elements stored by two programs (atomics are never conflicts,
  nor are stores a spin lock guards: `lock-guarded-store` says what was assumed);
- `uncovered-output`: output elements no program stores (outputs aliased to an input keep
  its values, and are left out).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from pallaslab.analysis.finding import Finding
from pallaslab.analysis.output_writes import lock_guarded_finding, lock_guards, unwritten_outputs
from pallaslab.analysis.tiling import Tiling
from pallaslab.model import Kernel, Operand
from pallaslab.model._jax import stores
from pallaslab.model.source_names import short_source

MAX_EXAMPLES = 8
EVALUATED = ("were evaluated per program on the captured scalar-prefetch values and seeded "
             "inputs.")


def decides_by_stores(kernel: Kernel) -> bool:
    """Are the kernel's windows whole arrays, so only its stores can say who writes what?"""
    eqn = getattr(kernel.handle, "eqn", None)
    return kernel.kind == "pallas_call" and eqn is not None and stores.whole_array_kernel(eqn)


def store_findings(kernel: Kernel, tiling: Tiling) -> Iterator[Finding]:
    """Out-of-bounds accesses, write conflicts and unwritten output of a whole-array kernel."""
    if kernel.programs == 0:  # nothing runs: `empty-grid` and the window rules say so
        return
    try:
        accesses = kernel_accesses(kernel)
    except Exception as err:  # the evaluation failed: say so, never a silent pass
        yield _not_analysed(kernel, err)
        return
    yield from _out_of_bounds(kernel, tiling, accesses.out_of_bounds)
    yield from _conflicts(kernel, tiling, accesses.stored)
    yield from _uncovered(kernel, accesses.stored)


_EVALUATED: dict[int, tuple[Any, stores.Accesses]] = {}  # id(eqn) -> (eqn, its accesses)


def kernel_accesses(kernel: Kernel) -> stores.Accesses:
    """The loads and stores of a whole-array kernel's programs, evaluated once per kernel
    (the findings and a comparison's attribution share them; seconds on large grids)."""
    eqn = kernel.handle.eqn
    kept = _EVALUATED.get(id(eqn))
    if kept is not None and kept[0] is eqn:
        return kept[1]
    prefetch = [v for v in kernel.prefetch_values if v is not None]
    # the body's `pl.debug_print`s are the kernel's, printed by its runs: not by this analysis
    with contextlib.redirect_stdout(io.StringIO()):
        accesses = stores.evaluate_accesses(eqn, stores.sample_operands(eqn, prefetch))
    while len(_EVALUATED) >= 8:  # the most recent kernels only
        del _EVALUATED[next(iter(_EVALUATED))]
    _EVALUATED[id(eqn)] = (eqn, accesses)
    return accesses


def last_writers(kernel: Kernel, origin: str) -> np.ndarray | None:
    """Per element of output `origin`: the program step (row-major) that stored it last, -1
    where none did; None when the kernel is not judged by its stores or cannot be."""
    if not decides_by_stores(kernel) or not kernel.programs:
        return None
    outputs = [op.origin for op in kernel.outputs]
    try:
        return kernel_accesses(kernel).stored[outputs.index(origin)].last
    except Exception:  # attribution falls back to the windows; the kernel's findings say
        return None  # why its stores could not be evaluated


def _not_analysed(kernel: Kernel, err: Exception) -> Finding:
    if isinstance(err, stores.NotAnalysable):
        why = f": {err}"
    else:  # JAX's own words, kept last as a detail for a bug report
        line = (str(err).strip().splitlines() or [""])[0][:200]
        why = f" (evaluator error: {type(err).__name__}: {line})"
    return Finding(
        "parallel-write-conflict", "warning",
        f"{kernel.name}: every program's window is the whole output, and pallaslab could not "
        f"analyse the kernel's loads and stores to tell which elements each program writes"
        f"{why}. A race between programs, an access outside an array and unwritten output "
        "are not ruled out.")


def _named(op: Operand) -> str:
    return f"{op.origin} ({op.param})" if op.param else op.origin


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _out_of_bounds(kernel: Kernel, tiling: Tiling,
                   found: Sequence[stores.OutOfBounds]) -> Iterator[Finding]:
    for oob in found:
        op = kernel.operands[oob.operand]
        programs = tuple(tiling.program_at(s) for s in oob.steps)
        where = "" if oob.source is None else f" at {_short(oob.source)}"
        span = (f"element {oob.first}" if oob.elements == 1
                else f"from element {oob.first} to {oob.last}")
        verb = {"load": "loads", "store": "stores"}.get(oob.access, "atomically updates")
        yield Finding(
            "out-of-bounds-access", "error",
            f"{_named(op)}: the {oob.access}{where} reaches outside the array {op.shape}: "
            f"program {programs[0]} {verb} {_plural(oob.elements, 'element')} outside it, "
            f"{span} ({_plural(oob.programs, 'program')} in all). JAX's interpreters clamp "
            "or drop such indices, so the outputs can look right on a CPU; on a GPU they are "
            "illegal memory accesses. Rule: every lane a load or store does not mask off must "
            "index inside its array (mask the ragged last block, e.g. mask=idx < n). Loads and "
            "stores " + EVALUATED,
            operand=op.origin, programs=programs,
            blocks=(oob.first,) if oob.first == oob.last else (oob.first, oob.last))


def _conflicts(kernel: Kernel, tiling: Tiling,
               stored: Sequence[stores.StoredElements]) -> Iterator[Finding]:
    guarded = lock_guards(kernel)
    for op, elements in zip(kernel.outputs, stored, strict=True):
        shared = np.flatnonzero(elements.count >= 2)
        if not len(shared):
            continue
        at = _elements(shared[:MAX_EXAMPLES], elements.count.shape)
        first = tiling.program_at(int(elements.first.flat[shared[0]]))
        last = tiling.program_at(int(elements.last.flat[shared[0]]))
        if op.origin in guarded:  # the programs store in turn, holding the lock
            yield lock_guarded_finding(
                kernel, op, guarded[op.origin],
                f"programs {first} and {last} both store element {at[0]}")
            continue
        yield Finding(
            "parallel-write-conflict", "error",
            f"{op.origin}: programs {first} and {last} both store element {at[0]} "
            f"({len(shared):,} element{'s' if len(shared) != 1 else ''} of {op.origin} are "
            f"stored by more than one program), and on GPU every program may run concurrently: "
            "they race. Rule: each element must be stored by one program (mask the stores), "
            "or combined with atomics (pl.atomic_add, ...). Stores " + EVALUATED,
            operand=op.origin, programs=(first, last), blocks=tuple(at))


def _uncovered(kernel: Kernel, stored: Sequence[stores.StoredElements]) -> Iterator[Finding]:
    """Output elements no program stores (the window rule's `uncovered-output`, per element)."""
    never = {f.operand for f in unwritten_outputs(kernel)}  # said once, by that rule
    for op, elements in zip(kernel.outputs, stored, strict=True):
        if op.aliased_with is not None:  # unstored elements keep the input's values
            continue
        if op.origin in never:
            continue
        written = elements.written if elements.written is not None else elements.count > 0
        missing = np.flatnonzero(~written)
        if not len(missing):
            continue
        at = _elements(missing[:MAX_EXAMPLES], elements.count.shape)
        total = elements.count.size
        yield Finding(
            "uncovered-output", "error",
            f"{op.origin}: {len(missing):,} of {total:,} elements "
            f"({100 * len(missing) / total:.1f}%) are never {_unwritten(elements, at[0])}. Stores "
            + EVALUATED,
            operand=op.origin, blocks=tuple(at))


def _unwritten(elements: stores.StoredElements, first: tuple[int, ...]) -> str:
    """The rest of the `uncovered-output` sentence, naming the stores (and atomics)."""
    stores_at = ", ".join(_short(s) for s in elements.sources)
    atomics_at = ", ".join(_short(s) for s in elements.atomic_sources)
    if atomics_at:
        return (f"stored by any program, starting at element {first}; they hold whatever was "
                f"in memory (garbage on TPU/GPU), and the atomics at {atomics_at} add to that. "
                "Rule: every output element must be stored by some program, or the output "
                "aliased to an initialised input (input_output_aliases) for atomics to "
                "accumulate into")
    check = (f"check the masks of the stores at {stores_at}" if stores_at
             else "the kernel body never stores into it")
    return (f"written by any program, starting at element {first}; they hold whatever was in "
            f"memory (garbage on TPU/GPU). Rule: every output element must be stored by some "
            f"program ({check})")


def _elements(flat: np.ndarray, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    return [tuple(int(i) for i in np.unravel_index(e, shape)) for e in flat]


def _short(source: str) -> str:
    """'/long/path/file.py:12' -> 'file.py:12'."""
    return short_source(source)

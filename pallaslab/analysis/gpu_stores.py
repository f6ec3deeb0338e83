"""GPU write conflicts decided from the elements programs really store.

Triton kernels usually take whole-array refs and store through masked `pl.ds` windows, so
every program's BlockSpec window is the whole output and the window rule would call every
such kernel racy. For those kernels each program's stores are evaluated (masks included; the
scalar-prefetch values captured, other inputs seeded) and only elements stored by two
programs are a conflict. Atomics (`pl.atomic_add`, ...) are never conflicts.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pallaslab.analysis.findings import Finding
from pallaslab.analysis.tiling import Tiling
from pallaslab.model import Kernel
from pallaslab.model._jax import stores

MAX_EXAMPLES = 8


def decides_by_stores(kernel: Kernel) -> bool:
    """Are the kernel's windows whole arrays, so only its stores can say who writes what?"""
    eqn = getattr(kernel.handle, "eqn", None)
    return kernel.kind == "pallas_call" and eqn is not None and stores.whole_array_kernel(eqn)


def store_conflicts(kernel: Kernel, tiling: Tiling) -> Iterator[Finding]:
    eqn = kernel.handle.eqn
    prefetch = [v for v in kernel.prefetch_values if v is not None]
    try:
        stored = stores.stored_elements(eqn, stores.sample_operands(eqn, prefetch))
    except Exception as err:  # the evaluation failed: say so, never a silent pass
        line = (str(err).strip().splitlines() or [""])[0][:200]
        yield Finding(
            "parallel-write-conflict", "warning",
            f"{kernel.name}: every program's window is the whole output, and its stores could "
            f"not be evaluated to tell which elements each program writes "
            f"({type(err).__name__}: {line}): a race between programs is not ruled out.")
        return
    for op, elements in zip(kernel.outputs, stored, strict=True):
        shared = np.flatnonzero(elements.count >= 2)
        if not len(shared):
            continue
        at = [tuple(int(i) for i in np.unravel_index(e, elements.count.shape))
              for e in shared[:MAX_EXAMPLES]]
        first = tiling.program_at(int(elements.first.flat[shared[0]]))
        last = tiling.program_at(int(elements.last.flat[shared[0]]))
        yield Finding(
            "parallel-write-conflict", "error",
            f"{op.origin}: programs {first} and {last} both store element {at[0]} "
            f"({len(shared):,} element{'s' if len(shared) != 1 else ''} of {op.origin} are "
            f"stored by more than one program), and on GPU every program may run concurrently: "
            "they race. Rule: each element must be stored by one program (mask the stores), "
            "or combined with atomics (pl.atomic_add, ...). Stores were evaluated per program "
            "on the captured scalar-prefetch values and seeded inputs.",
            operand=op.origin, programs=(first, last), blocks=tuple(at))


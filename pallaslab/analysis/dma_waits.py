"""Copies a kernel starts and never waits (`unwaited-dma`): a TPU `make_async_copy(...).start()`
(or a remote copy) whose DMA semaphore no wait ever names, a Mosaic GPU TMA copy whose barrier
no `plgpu.barrier_wait` ever names. The copy may still be writing its destination when the
body reads it, and the kernel may end with it in flight; JAX's TPU interpreter completes the
copy anyway, so a run shows at most a mismatch.

Counted per semaphore over the whole body (every branch, loop, pipeline body and `run_scoped`),
never per descriptor or iteration: double buffering starts copy i+1 and waits copy i on the
same semaphore array, a wait may sit in a `pl.when` or a later program. So a copy is reported
only when its semaphore is certainly never waited in this kernel: it is the kernel's own
(scratch or `run_scoped`, which end with the kernel: no other kernel can wait it), the body was
read whole (no `structure-unread`), no wait names a semaphore the walk could not trace to its
ref, and no wait, DMA wait or read names that semaphore ref at any index. Left unsaid: a copy
on a semaphore (array) waited for another copy only.
"""

from __future__ import annotations

from collections.abc import Sequence

from pallaslab.analysis.finding import Finding
from pallaslab.analysis.smem_order import line_label
from pallaslab.model import Kernel, Operand, _jax
from pallaslab.model.kernel import DmaCopy

CODE = "unwaited-dma"

# Operations that end a wait on (or look at) a semaphore: any of them may be the copy's wait.
_WAITS = frozenset({"dma_wait", "wait", "read", "barrier_wait"})


def unwaited_dma_findings(kernel: Kernel, found: tuple[Finding, ...] = ()) -> tuple[Finding, ...]:
    """One error per copy of `kernel` whose semaphore (barrier) is never waited. `found`:
    the kernel's other findings, so a TMA copy already reported as `unwaited-copy` (its SMEM
    used in flight) is not reported twice."""
    if not kernel.dmas or kernel.structure_notes:
        return ()
    waited = {op.semaphore for op in kernel.semaphore_ops if op.kind in _WAITS}
    if "local" in waited:  # a wait on a semaphore the walk could not name: it may be any
        return ()
    said = {f.operand for f in found if f.code == "unwaited-copy"}
    return tuple(_finding(kernel, d) for d in kernel.dmas
                 if d.kind != "sync" and d.semaphore is not None
                 and d.semaphore not in waited and _own(kernel, d.semaphore)
                 and not (d.kind == "tma" and d.dst in said))


def _own(kernel: Kernel, origin: str) -> bool:
    """A semaphore the kernel allocates (scratch, run_scoped): none outside it can wait it."""
    if origin.startswith("scoped["):
        return True
    return any(op.origin == origin and op.role == "scratch" for op in kernel.operands)


def _finding(kernel: Kernel, dma: DmaCopy) -> Finding:
    tma = dma.kind == "tma"
    sem = "barrier" if tma else "semaphore"
    at = line_label(dma.source, kernel)
    if tma:
        rule = ("Rule: a plgpu.copy_gmem_to_smem must be waited with plgpu.barrier_wait on its "
                "barrier before its SMEM is used and before the kernel ends.")
    else:
        rule = ("Rule: every started DMA must be waited (`.wait()` on its descriptor, or on "
                "any copy descriptor over the same semaphore) before its destination is read "
                "and before the kernel ends. JAX's TPU interpreter completes the copy "
                "regardless, so a run shows at most wrong values.")
    return Finding(
        CODE, "error",
        f"{kernel.name}: the {'TMA copy' if tma else 'DMA'} {_ref(kernel, dma.src)} -> "
        f"{_ref(kernel, dma.dst)} started at {at} is never waited: no wait on its {sem} "
        f"{_ref(kernel, dma.semaphore or '')} anywhere in the body. {rule}",
        operand=dma.dst)


def _ref(kernel: Kernel, origin: str) -> str:
    """"scratch[0] (x_vmem)": the origin with the parameter's name when known."""
    for op in (*kernel.operands, *kernel.scoped):
        if op.origin == origin and op.param:
            return f"{origin} ({op.param})"
    return origin


def unwaited_passed_dma_findings(kernels: Sequence[Kernel]) -> tuple[tuple[Finding, ...], ...]:
    """Per kernel of a call, in launch order: one error per copy it starts on a DMA semaphore
    it returns (JAX's async-copy pattern: a later `pallas_call` takes the semaphore and waits)
    that no later kernel may wait on (`_maybe_waited`): the copy is then never known to have
    landed. A body not read whole leaves it unsaid."""
    found = []
    for n, k in enumerate(kernels):
        later = kernels[n + 1:]
        found.append(() if k.structure_notes else tuple(
            _passed_finding(k, d) for d in k.dmas
            if d.kind != "sync" and d.semaphore is not None
            and (sem := _returned_semaphore(k, d.semaphore)) is not None
            and not _maybe_waited(k, sem, later)))
    return tuple(found)


def _returned_semaphore(kernel: Kernel, origin: str) -> Operand | None:
    return next((op for op in kernel.outputs if op.origin == origin
                 and op.value_type == "dma_sem"), None)


def _maybe_waited(kernel: Kernel, sem: Operand, later: Sequence[Kernel]) -> bool:
    """May a later kernel wait on `sem`? The kernel that takes it straight from this one
    (the same jaxpr variable) must wait on that input; followed no further (through a `jit`),
    any later kernel waiting on a DMA semaphore it takes may be its waiter."""
    user = _jax.semaphore_user(kernel, sem, later)
    if user is not None:
        return _waits_on(user[0], {user[1].origin})
    return any(_waits_on(j, {op.origin for op in j.inputs if op.value_type == "dma_sem"})
               for j in later)


def _waits_on(kernel: Kernel, semaphores: set[str]) -> bool:
    """Does `kernel` wait on (or may it wait on) one of `semaphores`, inputs of it?"""
    if kernel.structure_notes:
        return True  # not read whole: it may
    return bool(semaphores) and any(op.kind in _WAITS and op.semaphore in (*semaphores, "local")
                                    for op in kernel.semaphore_ops)


def _passed_finding(kernel: Kernel, dma: DmaCopy) -> Finding:
    return Finding(
        CODE, "error",
        f"{kernel.name}: the DMA {_ref(kernel, dma.src)} -> {_ref(kernel, dma.dst)} started at "
        f"{line_label(dma.source, kernel)} on the semaphore the kernel returns "
        f"({_ref(kernel, dma.semaphore or '')}) is waited by no later kernel: none waits on a "
        "DMA semaphore it takes, so the copy's destination is never known to have landed. "
        "Rule: a DMA semaphore returned by a pallas_call must be waited in a later pallas_call "
        "before the copy's destination is read.", operand=dma.dst)

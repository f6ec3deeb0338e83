"""Waits no signal can end (`unsignalled-wait`): a `pl.semaphore_wait` on a semaphore the
kernel owns (scratch, `run_scoped`, or a Mosaic GPU global semaphore from `pl.get_global`)
that nothing in the body ever signals, neither a `pl.semaphore_signal` (to this device or
another, to this core or another: the same body runs on each) nor a DMA. Nothing outside the
kernel can signal such a semaphore, so the first of these waits to run blocks forever: on a
device the kernel hangs. Only said when the body was read whole and every signal names its
semaphore.
"""

from __future__ import annotations

from pallaslab.analysis.finding import Finding
from pallaslab.analysis.smem_order import line_label
from pallaslab.model import Kernel
from pallaslab.model.kernel import SemaphoreOp

CODE = "unsignalled-wait"
GLOBAL = "global semaphore"  # the origin of a `pl.get_global` semaphore starts so


def unsignalled_wait_findings(kernel: Kernel) -> tuple[Finding, ...]:
    """One error per semaphore the kernel owns and waits on that nothing signals."""
    if kernel.structure_notes:
        return ()
    signalled = {op.semaphore for op in kernel.semaphore_ops if op.kind == "signal"}
    signalled |= {d.semaphore for d in kernel.dmas if d.semaphore is not None}
    if "local" in signalled:  # a signal the walk could not trace: it may be any
        return ()
    first: dict[str, SemaphoreOp] = {}
    for op in kernel.semaphore_ops:
        if op.kind == "wait" and op.semaphore not in signalled and _own(kernel, op.semaphore):
            first.setdefault(op.semaphore, op)
    return tuple(_finding(kernel, op) for op in first.values())


def _own(kernel: Kernel, origin: str) -> bool:
    """A semaphore only this kernel can signal: its scratch, `run_scoped` or global one."""
    if origin.startswith(("scoped[", GLOBAL)):
        return True
    return any(op.origin == origin and op.role == "scratch" for op in kernel.operands)


def _finding(kernel: Kernel, wait: SemaphoreOp) -> Finding:
    return Finding(
        CODE, "error",
        f"{kernel.name}: the semaphore wait at {line_label(wait.source, kernel)} waits on "
        f"{wait.semaphore}, which nothing in the kernel signals (no pl.semaphore_signal to any "
        "device or core, no DMA on it), and no other kernel can: the wait blocks forever, and "
        "on a device the kernel hangs. Rule: every semaphore a kernel waits on must be "
        "signalled (by this kernel, on this or another device or core) as often as it is "
        "waited.", operand=wait.semaphore)

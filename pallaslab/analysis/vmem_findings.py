"""The VMEM findings of a TPU kernel on each chip: `vmem-overflow`, `vmem-spill-risk`,
`vmem-limit-above-chip` and `no-sparse-core`, from its occupancy (`occupancy`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pallaslab.analysis.chips import DEFAULT_CHIPS, Chip
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.finding import Finding
from pallaslab.analysis.occupancy import (
    Occupancy,
    applies,
    kib,
    occupancy,
    on_sparse_core,
)
from pallaslab.model import Kernel

# The findings this module makes: the Memory view shows exactly these of a kernel's findings.
VMEM_CODES = ("vmem-overflow", "vmem-spill-risk", "vmem-limit-above-chip", "no-sparse-core")


def vmem_findings(kernel: Kernel, chips: Iterable[str] = DEFAULT_CHIPS,
                  measured: Mapping[str, int] | None = None) -> tuple[Finding, ...]:
    """A `vmem-overflow` error for every chip the kernel's buffers do not fit; a
    `vmem-limit-above-chip` note where its `vmem_limit_bytes` exceeds the chip's VMEM (the
    compiler caps it, it does not refuse it); a `vmem-spill-risk` warning where the buffers
    fit but not with the matrix product the body materialises (`Occupancy.need_bytes`).
    `measured` (chip -> libtpu's exact need, the smallest `vmem_limit_bytes` it accepts)
    overrides the spill-risk estimate: the compiler's figure is not a risk but the fact."""
    if not applies(kernel):
        return ()
    out = []
    for name in chips:
        if on_sparse_core(kernel) and get_chip(name).sparse_core_vmem is None:
            out.append(no_sparse_core_finding(kernel, get_chip(name)))
            continue
        occ = occupancy(kernel, name)
        if not occ.fits:
            out.append(overflow_finding(occ))
            continue
        if occ.limit > occ.effective_limit:
            out.append(limit_above_chip_finding(occ))
        if not occ.need_fits and not _measured_fits(occ, measured):
            out.append(spill_risk_finding(occ))  # the buffers fit, not with the body's product
    return tuple(out)


def _measured_fits(occ: Occupancy, measured: Mapping[str, int] | None) -> bool:
    need = (measured or {}).get(occ.chip)
    return need is not None and need <= occ.effective_limit


def spill_risk_finding(occ: Occupancy) -> Finding:
    assert occ.product is not None
    shape, dtype, size = occ.product
    return Finding(
        code="vmem-spill-risk", severity="warning",
        message=f"{occ.kernel} on TPU {occ.chip}: its buffers need {kib(occ.bytes)} of the "
                f"{kib(occ.effective_limit)} scoped-VMEM limit, and its body computes a "
                f"{dtype}{list(shape)} matrix product ({kib(size)}) that the compiler keeps in "
                f"scoped VMEM too: {kib(occ.need_bytes)} would not fit. Rule: a matrix "
                "product larger than the vector registers lands in scoped VMEM (libtpu was "
                "measured to need up to about twice the largest); shrink the blocks that size "
                "it or raise `vmem_limit_bytes`, and compile for the target (`pallaslab lower "
                "--compile`) to know for sure.",
    )


def no_sparse_core_finding(kernel: Kernel, chip: Chip) -> Finding:
    kind = kernel.mesh.kind if kernel.mesh is not None else "SparseCore"
    return Finding(
        code="no-sparse-core", severity="error",
        message=f"{kernel.name} runs on SparseCore subcores (a {kind} kernel) but TPU "
                f"{chip.name} has no SparseCore: the compiler refuses it there. Rule: "
                "SparseCore kernels need a chip with SparseCores (v5p, v6e, 7x).",
    )


def limit_above_chip_finding(occ: Occupancy) -> Finding:
    return Finding(
        code="vmem-limit-above-chip", severity="info",
        message=f"{occ.kernel} on TPU {occ.chip} asks for vmem_limit_bytes={occ.limit} "
                f"({kib(occ.limit)}), more than the chip's {kib(occ.vmem_capacity)} of VMEM: "
                f"the compiler caps the limit at the {kib(occ.effective_limit)} it lets "
                f"kernels use, and the {kib(occ.bytes)} the kernel needs fit under it. Rule: "
                "scoped VMEM is bounded by min(vmem_limit_bytes, the chip's usable VMEM).",
    )


def overflow_finding(occ: Occupancy) -> Finding:
    space = "smem" if occ.smem_bytes > occ.smem_capacity else "vmem"
    top = sorted((o for o in occ.operands if o.space == space and o.bytes),
                 key=lambda o: -o.bytes)[:3]
    parts = ", ".join(f"{o.origin} {o.buffers} x {kib(o.buffer_bytes)}" for o in top)
    largest = f" Largest: {parts}." if parts else ""
    if occ.smem_bytes > occ.smem_capacity:
        what = f"needs {kib(occ.smem_bytes)} of SMEM, more than the {kib(occ.smem_capacity)}"
    elif occ.limit > occ.effective_limit:
        what = (f"needs {kib(occ.bytes)} of scoped VMEM, more than the "
                f"{kib(occ.effective_limit)} of the chip's {kib(occ.vmem_capacity)} of VMEM "
                f"the compiler lets kernels use (it caps vmem_limit_bytes={occ.limit} there)")
    else:
        what = (f"needs {kib(occ.bytes)} of scoped VMEM but the limit is {kib(occ.limit)} "
                f"({occ.limit_source})")
    hint = ("raise `vmem_limit_bytes` in pltpu.CompilerParams (up to "
            f"{kib(occ.vmem_capacity)}) or use smaller blocks / pl.Buffered(1)")
    return Finding(
        code="vmem-overflow", severity="error",
        message=f"{occ.kernel} on TPU {occ.chip} {what}.{largest} Rule: all pipeline "
                f"buffers and scratch must fit the scoped-VMEM limit; {hint}.",
        operand=top[0].origin if top else None,
    )

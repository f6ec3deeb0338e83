"""Mosaic GPU kernels that touch SMEM while a TMA copy may still use it (`unwaited-copy`,
`uncommitted-smem`): found by walking the kernel body in program order
(`pallaslab.model._jax.tma_hazards`), since JAX's GPU interpreter lands every TMA copy at once
and so passes these kernels on every run."""

from __future__ import annotations

from pallaslab.analysis.finding import Finding
from pallaslab.model import Kernel
from pallaslab.model._jax import tma_hazards
from pallaslab.model._jax.tma_hazards import SmemHazard
from pallaslab.model.source_names import cell_label, file_label

SMEM_ORDER_CODES = ("unwaited-copy", "uncommitted-smem")

_WHY = ("JAX's GPU interpreter lands a TMA copy at once, so runs agree where a GPU uses "
        "stale SMEM.")


def smem_order_findings(kernel: Kernel) -> tuple[Finding, ...]:
    """One error per hazard of a Mosaic GPU kernel; () for other kernels."""
    try:
        hazards = tma_hazards.smem_hazards(kernel)
    except Exception as err:  # the walk failed: say so, never a silent pass
        return (Finding("structure-unread", "warning",
                        f"{kernel.name}: the order of its TMA copies, barrier waits and SMEM "
                        f"accesses is not checked (reading it failed: {type(err).__name__}: "
                        f"{str(err)[:200]})"),)
    return tuple(_finding(kernel, h) for h in hazards)


def _finding(kernel: Kernel, hazard: SmemHazard) -> Finding:
    ref, copy_at, access_at = (hazard.ref, line_label(hazard.copy_line, kernel),
                                 line_label(hazard.access_line, kernel))
    if hazard.kind == "unwaited-copy":
        barrier = f"plgpu.barrier_wait({hazard.barrier.param or hazard.barrier.origin})" \
            if hazard.barrier is not None else "a plgpu.barrier_wait on the copy's barrier"
        message = (
            f"{kernel.name}: SMEM {ref} is used ({hazard.access}) at {access_at} while the TMA "
            f"copy into it at {copy_at} may still be in flight: no {barrier} between them. "
            "Rule: SMEM that plgpu.copy_gmem_to_smem fills may be touched only after waiting "
            f"on the copy's barrier. {_WHY}")
    else:
        message = (
            f"{kernel.name}: SMEM {ref} is written by the threads at {copy_at} and TMA-copied "
            f"to GMEM at {access_at} with no plgpu.commit_smem() between. Rule: SMEM the "
            "threads write must be committed (plgpu.commit_smem) before a copy_smem_to_gmem "
            f"reads it, or the copy may send stale data. {_WHY}")
    return Finding(hazard.kind, "error", message, operand=ref.origin)


def line_label(source: str | None, kernel: Kernel) -> str:
    """"file.py:LINE" without the directories. A case file a worker process rebuilt is
    "<dynamic-code>" there: named by the kernel's own file."""
    if not source:
        return "an unknown line"
    file, _, line = source.rpartition(":")
    if file == "<dynamic-code>":
        home = (kernel.source or "").rsplit(":", 1)[0]
        file = home if home.endswith(".py") or cell_label(home) else ""
    return f"{file_label(file)}:{line}" if file else f"line {line}"

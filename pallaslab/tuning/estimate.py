"""One candidate's kernels on one TPU chip: do they fit, how long will they take, and what
bounds that time (the pipeline model; a grouped matmul's nested pipeline for a ragged dot; the
roofline where a kernel moves its own data)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pallaslab.analysis.chips import chip as get_chip
from pallaslab.analysis.cost import step_cost
from pallaslab.analysis.occupancy import occupancy
from pallaslab.analysis.pipeline import (
    STEP_OVERHEAD,
    PipelineError,
    compute_time,
    pipeline,
    roofline_time,
)
from pallaslab.analysis.ragged import grouped_pipeline_time
from pallaslab.analysis.tiling import Tiling
from pallaslab.analysis.vmem_findings import overflow_finding, spill_risk_finding
from pallaslab.model import Kernel
from pallaslab.tuning.result import ChipEstimate

HBM_SHARE = 0.9  # copies busy this share of the predicted time: the kernel is HBM-bound


def estimate(kernels: Sequence[tuple[Kernel, Tiling | None]], chip: str) -> ChipEstimate:
    """The kernels of one candidate on `chip`: times add, every kernel must fit."""
    bounds: dict[str, float] = {}
    models: set[str] = set()
    total, fits, need, limit, reason = 0.0, True, 0, 0, None
    flops, moved = 0.0, 0
    for kernel, tiling in kernels:
        occ = occupancy(kernel, chip)
        need, limit = max(need, occ.need_bytes), max(limit, occ.effective_limit)
        if not occ.fits or not occ.need_fits:
            fits = False
            found = overflow_finding(occ) if not occ.fits else spill_risk_finding(occ)
            reason = reason or found.message
        time, shares, model, work = kernel_time(kernel, tiling, chip)
        flops, moved = flops + work[0], moved + work[1]
        models.add(model)
        total += time
        for name, seconds in shares.items():
            bounds[name] = bounds.get(name, 0.0) + seconds
    ok = not math.isnan(total)
    bound = max(bounds, key=lambda b: bounds[b]) if ok and bounds else None
    return ChipEstimate(chip, fits, need, limit, total if ok else None, bound,
                        "roofline" if "roofline" in models else "pipeline", reason,
                        flops or None, moved or None)


def kernel_time(kernel: Kernel, tiling: Tiling | None, chip: str
                ) -> tuple[float, dict[str, float], str, tuple[float, int]]:
    """(predicted seconds, seconds per bound, the model used, (its ops, its HBM bytes): the
    pipeline's, or the whole grid's ops and each HBM operand once). The bound is the largest of
    the compute (MXU and VPU work), the per-step overhead and the copies compute waits for;
    HBM when the copies keep HBM busy for most of the time."""
    c = get_chip(chip)
    grouped = _grouped_time(kernel, chip)
    if grouped is not None:
        return grouped, {"compute": grouped}, "pipeline", (0.0, 0)
    if tiling is not None:
        try:
            p = pipeline(kernel, c, tiling=tiling)
        except PipelineError:
            pass
        else:
            s = p.summary
            overhead = s.steps * STEP_OVERHEAD
            shares = {"compute": s.compute_time - overhead, "per-step overhead": overhead,
                      "exposed DMA": s.exposed_copy_time}
            if s.hbm_bytes / c.hbm_bandwidth >= HBM_SHARE * s.predicted_time:
                shares["HBM"] = s.predicted_time
            return s.predicted_time, shares, "pipeline", (float(s.flops), int(s.hbm_bytes))
    time = roofline_time(kernel, c)
    programs = max(1, kernel.programs or 1)
    compute = compute_time(kernel, c, step_cost(kernel, c.mxu_size)) * programs
    overhead = programs * STEP_OVERHEAD
    moved = time - overhead  # the roofline's larger term: the MXU's, or HBM's
    work = (step_cost(kernel, c.mxu_size).flops * programs,
            sum(math.prod(op.shape) * np.dtype(op.dtype).itemsize for op in kernel.operands
                if op.role in ("input", "output")
                and op.memory_space in ("any", "hbm", "default")))
    return time, {"compute": compute, "HBM": moved if moved > compute else 0.0,
                  "per-step overhead": overhead}, "roofline", (float(work[0]), int(work[1]))


def _grouped_time(kernel: Kernel, chip: str) -> float | None:
    """A grouped matmul (a ragged dot's nested pipeline over row tiles chosen by its group
    sizes): its grouped pipeline with the rows split evenly over the groups (the sizes are data
    the capture does not hold), else None. Its outer grid windows only the group metadata, so
    the outer pipeline alone would miss the matmul."""
    inner = kernel.pipelines[0] if kernel.pipelines else None
    if inner is None:
        return None
    ins = [op for op in inner.operands if op.role == "input" and op.block_dims]
    outs = [op for op in inner.operands if op.role == "output" and op.block_dims]
    if len(ins) != 2 or len(outs) != 1 or len(ins[0].shape) != 2:
        return None
    grouped = outs[0] if len(outs[0].shape) == 3 else ins[1]
    if len(grouped.shape) != 3 or not grouped.shape[0]:
        return None
    groups, rows = int(grouped.shape[0]), int(ins[0].shape[0])
    share, extra = divmod(rows, groups)
    sizes = np.full(groups, share, np.int64)
    sizes[:extra] += 1
    return grouped_pipeline_time(kernel, chip, sizes)

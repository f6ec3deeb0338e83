"""The Pipeline view of a GPU kernel (Triton, Mosaic GPU): the GPU time model's prediction.

A GPU kernel has no TPU software pipeline to draw. Its Pipeline tab shows, per GPU the workbench
targets (H100 unless `gpu-*` targets are named), `gpu_model.gpu_prediction`: the time, its bound
(compute, memory, latency) and the figures behind it (waves of blocks over the SMs, flops at the
tensor-core peak, bytes moved through HBM, the per-block overhead), then the measured profile
where a GPU ran it, and the published timings of the kernel's op and shapes on GPUs where
`$PALLASLAB_PUBLISHED_TIMINGS` names tokamax's table. `gpu_facts` words them once: the view's
tree (text, static HTML) and the widget's payload carry the same (fact, value) pairs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pallaslab.analysis import gpu_model_published, published
from pallaslab.analysis.gpu_model import GPUS, GpuPrediction, gpu_prediction, gpu_spec
from pallaslab.model import Kernel
from pallaslab.views.pipeline_manual import format_time

GPU_BACKENDS = ("triton", "mosaic_gpu")
DEFAULT_GPUS = ("h100",)
# The arrays that name a published problem's size, per op (as `published` does for TPU ops).
_MAIN_ARRAYS = {"flash_attention": ("q", "k", "v"), "flash_attention_vjp": ("q", "k", "v"),
                "gated_linear_unit": ("x", "weights"), "ragged_dot": ("lhs", "rhs"),
                "normalization": ("x",)}


def is_gpu_kernel(kernel: Kernel) -> bool:
    return kernel.backend in GPU_BACKENDS


def target_gpus(targets: Sequence[str]) -> tuple[str, ...]:
    """The GPUs the model predicts for: the `gpu-*` targets the workbench was asked for that
    the model knows, in order; H100 when none is named."""
    named = [t.lower().removeprefix("gpu-") for t in targets if t.lower().startswith("gpu-")]
    gpus = tuple(dict.fromkeys(g for g in named if g in GPUS))
    return gpus or DEFAULT_GPUS


def predictions(kernel: Kernel, gpus: Sequence[str]) -> list[GpuPrediction]:
    return [gpu_prediction(kernel, gpu) for gpu in gpus]


def gpu_lead(preds: Sequence[GpuPrediction]) -> str:
    """The lead line: blocks, then the time and bound on each GPU."""
    times = "; ".join(f"{p.gpu.upper()} {format_time(p.time_s)}, {p.bound}-bound"
                      for p in preds)
    return f"{_count(preds[0].work.blocks, 'block')}, predicted {times} (GPU time model)"


def gpu_facts(kernel: Kernel, preds: Sequence[GpuPrediction]) -> list[tuple[str, str]]:
    """(fact, value) per GPU: the prediction and bound, the waves, the three terms; then the
    work they come from: flops, bytes moved, the per-block overhead."""
    facts: list[tuple[str, str]] = []
    for p in preds:
        spec = gpu_spec(p.gpu)
        name = p.gpu.upper()
        w = p.work
        facts += [
            (f"predicted on {name}", f"{format_time(p.time_s)}, {p.bound}-bound"),
            (f"{name} waves", f"{_count(w.blocks, 'block')} in {_count(p.waves, 'wave')} over "
                              f"{spec.sms} SMs, at most {p.blocks_per_sm} resident per SM "
                              f"(limited by {p.occupancy_limit})"),
            (f"{name} terms", f"compute {format_time(p.compute_s)} at "
                              f"{_tflops(spec.peak_flops, w.dot_dtype)} TFLOP/s "
                              f"({w.dot_dtype}), memory {format_time(p.memory_s)} at "
                              f"{spec.hbm_bytes_per_s / 1e12:g} TB/s, latency "
                              f"{format_time(p.latency_s)}"),
        ]
    w, spec = preds[0].work, gpu_spec(preds[0].gpu)
    facts += [
        ("flops", f"{w.flops:,.0f} ({w.flops_source})"),
        ("bytes moved", f"{w.hbm_bytes:,.0f} B through HBM (every input read and every "
                        "output written once)"),
        ("per-block overhead", f"launch {format_time(spec.launch_s)} per kernel, "
                               f"{format_time(spec.wave_latency_s)} pipeline fill per wave "
                               f"({_count(w.num_warps, 'warp')}, "
                               f"{_count(w.num_stages, 'stage')}, {w.shared_bytes:,} B shared "
                               "memory per block)"),
    ]
    return facts


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _tflops(peaks: Any, dtype: str) -> str:
    return f"{peaks.get(dtype, peaks['float32']) / 1e12:,.1f}"


# --- published GPU timings -------------------------------------------------------------------


@functools.cache
def _gpu_rows_cached(path: str, mtime: float) -> tuple[published.Row, ...]:
    return tuple(gpu_model_published.gpu_rows(published.read_rows(path)))


def published_gpu_lines(kernel: Kernel, gpus: Sequence[str] = DEFAULT_GPUS) -> list[str]:
    """One line per published GPU timing of the kernel's backend, op and shapes
    ($PALLASLAB_PUBLISHED_TIMINGS; none when it is unset), the given GPUs' first: rows whose
    main arrays (q/k/v, x/weights, lhs/rhs) all have the element count of a kernel operand."""
    from pallaslab import settings

    path = settings.published_timings()
    if path is None or not is_gpu_kernel(kernel):
        return []
    sizes = {math.prod(o.shape) for o in kernel.operands if o.role in ("input", "output")}
    rows = []
    for row in _gpu_rows_cached(path, Path(path).stat().st_mtime):
        backend, op = gpu_model_published.backend_op(row)
        if backend != kernel.backend or op not in _MAIN_ARRAYS:
            continue
        arrays = published.problem_arrays(row.problem)
        main = [arrays[n][0] for n in _MAIN_ARRAYS[op] if n in arrays]
        if main and all(math.prod(shape) in sizes for shape in main):
            rows.append(row)
    rows.sort(key=lambda r: (gpu_model_published.gpu_of(r) not in gpus, r.line))
    return [f"published on {r.hardware}: {r.median_s * 1e3:.3f} ms ({r.op_file}, tokamax "
            f"autotune, config {r.config}; {r.problem[:60]}...)" for r in rows[:8]]

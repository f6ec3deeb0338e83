"""Predicted time of a Triton or Mosaic GPU kernel on an NVIDIA GPU (issue 42, first version).

A roofline over waves of blocks: the kernel's blocks (Triton programs; Mosaic GPU programs
less the warpgroup axis) are spread over the GPU's SMs, `blocks_per_sm` resident at once
(the CUDA occupancy calculation of `occupancy_gpu`, from the compiler's shared memory and
registers when the caller hands them over, else from the block's own shared memory need);
each wave's blocks share their SM's tensor cores. The time is

    launch + max(compute, memory) + waves x wave_latency

compute: the dots' flops at the tensor-core peak of their operands' dtype, plus the elementwise
work on the FP32 cores and the transcendentals (exp, sigmoid) on the special-function units,
in turn (a block's warps issue each step's matrix product, then the softmax or activation that
depends on it), quantized to whole waves (a last, partial wave costs a full one on the SMs it
uses); memory: the bytes the kernel
must move through HBM (every input read and every output written once: re-reads of a block by
several programs are taken as L2 hits) at the HBM bandwidth; wave latency: one HBM round trip
per wave to fill its software pipeline (`num_stages` copies in flight hide the rest).
The bound is the largest of the three terms: "compute", "memory" or "latency".

Every constant is a public specification, cited where it is defined; nothing is fitted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pallaslab.analysis.occupancy_gpu import gpu_occupancy, mosaic_gpu_resources
from pallaslab.model import Kernel, _jax
from pallaslab.model._jax.chips import kernel_body_vector_ops
from pallaslab.model._jax.foreign import TritonLaunch
from pallaslab.model._jax.warpgroups import (
    lowers_producer_registers,
    syncs_warpgroups_by_named_barriers,
)

Bound = Literal["compute", "memory", "latency"]


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """Throughput figures of one GPU (dense tensor-core peaks, no sparsity)."""

    name: str
    sms: int
    hbm_bytes_per_s: float
    peak_flops: Mapping[str, float]  # operand dtype -> flop/s ("float32": TF32 tensor cores)
    launch_s: float  # a kernel's start and drain on the device
    wave_latency_s: float  # one HBM round trip: a wave's pipeline fill
    vector_ops_per_s: float  # FP32 core lanes: elementwise results per second
    transcendentals_per_s: float  # special-function unit (MUFU) results per second
    memory_bytes: float  # HBM capacity


# Launch: the device-side start of a grid and drain of its last blocks, ~2 us (NVIDIA, "CUDA
# C++ Best Practices Guide", section "Concurrent Kernel Execution"/"Kernel launch" and the
# Nsight Systems kernel-overhead figures: a few microseconds per kernel).
LAUNCH_S = 2e-6
# HBM access latency: ~600-800 ns on Hopper (Luo et al., "Benchmarking and Dissecting the
# Nvidia Hopper GPU Architecture", IPDPS 2024, global-memory latency tables); 0.7 us taken.
HBM_LATENCY_S = 0.7e-6

GPUS: dict[str, GpuSpec] = {
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5 column): HBM3 80 GB at 3.35 TB/s; dense
    # BF16/FP16 989.5 TFLOPS, TF32 494.7 TFLOPS, FP8 1,979 TFLOPS (the datasheet's figures "with
    # sparsity" halved); 132 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper, table 3).
    # Elementwise: 128 FP32 cores per SM (whitepaper), one result per clock each, at 1.83 GHz:
    # the clock the datasheet's tensor peak assumes (989.5e12 = 132 SMs x 4,096 dense flops
    # per clock x 1.83e9), not the 1.98 GHz its 67 TFLOPS FP32 assumes: the units run at one
    # clock, and a tensor-core kernel does not reach the higher one. Special functions: 16
    # per clock per SM (CUDA C++ Programming Guide, "Arithmetic Instructions", compute
    # capability 9.0) -> 3.9 TFLOPS (Shah et al., "FlashAttention-3", 2024, section 1: "989
    # TFLOPS of FP16 matmul but only 3.9 TFLOPS of special functions").
    "h100": GpuSpec("h100", 132, 3.35e12,
                    {"bfloat16": 989.5e12, "float16": 989.5e12, "float32": 494.7e12,
                     "float8_e4m3fn": 1979e12, "float8_e5m2": 1979e12, "int8": 1979e12},
                    LAUNCH_S, HBM_LATENCY_S, 132 * 128 * 1.83e9, 132 * 16 * 1.83e9, 80e9),
    # NVIDIA HGX B200 datasheet (per GPU): HBM3e 180 GB (1.44 TB for 8 GPUs) at 8 TB/s; dense
    # FP16/BF16 2.25 PFLOPS, TF32 1.1 PFLOPS, FP8 4.5 PFLOPS (sparse figures halved); 148 SMs
    # (NVIDIA Blackwell architecture technical brief: two dies of 74 SMs enabled).
    # FP32 600 TFLOPS for 8 GPUs (NVIDIA HGX B200 datasheet) -> 75 TFLOPS each, FMA as two;
    # special functions 16 per clock per SM (CUDA C++ Programming Guide, compute capability
    # 10.0) x 148 SMs x 1.965 GHz boost = 4.65e12.
    "b200": GpuSpec("b200", 148, 8.0e12,
                    {"bfloat16": 2.25e15, "float16": 2.25e15, "float32": 1.1e15,
                     "float8_e4m3fn": 4.5e15, "float8_e5m2": 4.5e15, "int8": 4.5e15},
                    LAUNCH_S, HBM_LATENCY_S, 75e12 / 2, 4.65e12, 180e9),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB): HBM2e 80 GB at 2,039 GB/s; BF16/FP16
    # 312 TFLOPS, TF32 156 TFLOPS, INT8 624 TOPS; 108 SMs (NVIDIA A100 architecture whitepaper).
    # FP32 19.5 TFLOPS (datasheet, FMA as two); special functions 16 per clock per SM (CUDA
    # C++ Programming Guide, compute capability 8.0) x 108 SMs x 1.41 GHz boost = 2.44e12.
    "a100": GpuSpec("a100", 108, 2.039e12,
                    {"bfloat16": 312e12, "float16": 312e12, "float32": 156e12,
                     "int8": 624e12},
                    LAUNCH_S, HBM_LATENCY_S, 19.5e12 / 2, 2.44e12, 80e9),
}


def gpu_spec(gpu: str) -> GpuSpec:
    key = gpu.lower().removeprefix("gpu-")
    if key not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}: known: {', '.join(GPUS)}")
    return GPUS[key]


@dataclasses.dataclass(frozen=True)
class GpuWork:
    """What a GPU kernel does, in the model's terms."""

    blocks: int  # thread blocks (CTAs) launched
    flops: float  # the dots' flops, whole kernel
    dot_dtype: str  # the dots' operand dtype: picks the tensor-core peak
    hbm_bytes: float  # bytes moved through HBM, whole kernel
    num_warps: int
    num_stages: int
    shared_bytes: int  # per block
    registers: int  # per thread (0: unknown, not a limit)
    flops_source: str  # "body dots", "cost estimate", or what the caller handed over
    vector_ops: float = 0.0  # elementwise results on the FP32 cores, whole kernel
    transcendentals: float = 0.0  # exp, log, sigmoid... on the special-function units
    compute_warpgroups: int = 1  # warpgroups that issue the dots and the elementwise work
    ping_pong: bool = False  # do named barriers schedule those warpgroups against each other?
    pipeline_steps: int = 0  # steps of the copy pipeline each output tile runs (0: many)


@dataclasses.dataclass(frozen=True)
class GpuPrediction:
    gpu: str
    work: GpuWork
    blocks_per_sm: int
    occupancy_limit: str  # what limits resident blocks: "warps", "shared memory", ...
    waves: int
    compute_s: float
    memory_s: float
    latency_s: float  # launch + the waves' pipeline fills
    time_s: float
    bound: Bound
    vector_s: float = 0.0  # of compute_s: the FP32 cores' and special functions' share

    def line(self) -> str:
        return (f"predicted on {self.gpu.upper()}: {self.time_s * 1e3:.3f} ms, {self.bound}-bound "
                f"({self.work.blocks:,} blocks in {self.waves} waves of {self.blocks_per_sm}/SM, "
                f"limited by {self.occupancy_limit}; compute {self.compute_s * 1e3:.3f} ms "
                f"({self.vector_s * 1e3:.3f} of it elementwise), "
                f"memory {self.memory_s * 1e3:.3f} ms, latency {self.latency_s * 1e3:.3f} ms)")


def predict_work(work: GpuWork, gpu: str = "h100") -> GpuPrediction:
    """The model on given work (the pure core: no capture needed)."""
    spec = gpu_spec(gpu)
    occ = gpu_occupancy(work.shared_bytes, work.registers, max(1, work.num_warps), spec.name)
    per_sm = max(1, occ.blocks_per_sm)  # a block that does not fit is still timed as one
    waves = max(1, math.ceil(work.blocks / (spec.sms * per_sm)))
    peak = spec.peak_flops.get(work.dot_dtype, spec.peak_flops["float32"])
    vector = (work.vector_ops / spec.vector_ops_per_s
              + work.transcendentals / spec.transcendentals_per_s)
    tensor = work.flops / peak
    # Two or more compute warpgroups scheduled against each other overlap one's elementwise
    # work with another's matrix products (FlashAttention-3's ping-pong scheduling, Shah et
    # al. 2024, section 3.1): the SM's tensor cores and its FP32/special-function units then
    # run at once. Unscheduled, each warpgroup's dot waits for the elementwise work it needs.
    overlapped = (max(tensor, vector) if work.compute_warpgroups >= 2 and work.ping_pong
                  else tensor + vector)
    block_compute = overlapped * spec.sms / max(1, work.blocks)
    used_per_wave = min(per_sm, max(1, math.ceil(work.blocks / spec.sms)))
    compute = waves * used_per_wave * block_compute
    memory = work.hbm_bytes / spec.hbm_bytes_per_s
    latency = spec.launch_s + waves * spec.wave_latency_s
    # A pipeline started afresh for each output tile hides its copies behind its compute
    # only from its second step on: of s steps, the first step's share of the smaller term
    # stays exposed (one step: the copies, then the math, then the stores, in turn).
    exposed = min(compute, memory) / work.pipeline_steps if work.pipeline_steps else 0.0
    time = max(compute, memory) + exposed + latency
    terms: dict[Bound, float] = {"compute": compute, "memory": memory, "latency": latency}
    bound = max(terms, key=lambda b: terms[b])
    return GpuPrediction(spec.name, work, occ.blocks_per_sm,
                         occ.limited_by if occ.blocks_per_sm else "does not fit", waves,
                         compute, memory, latency, time, bound,
                         compute * min(1.0, vector / max(overlapped, 1e-30)))


# --- from a captured kernel -------------------------------------------------------------------


def kernel_work(kernel: Kernel, *, flops: float | None = None, shared_bytes: int | None = None,
                registers: int | None = None, flops_source: str = "given",
                transcendentals: float | None = None, pipeline_steps: int = 0) -> GpuWork:
    """The work of a captured Triton or Mosaic GPU kernel. `flops`, `shared_bytes`,
    `registers` and `transcendentals` are what a caller knows better (the compiler's figures
    from a real compile, a problem's analytic work); otherwise they come from the capture;
    `pipeline_steps`, the steps each output tile's copy pipeline runs, where known."""
    backend = kernel.backend or "triton"
    params = dict(kernel.compiler_params.get(backend, {}))
    warpgroups = _warpgroups(kernel)
    blocks = max(1, (kernel.programs or 1) // warpgroups)
    if backend == "mosaic_gpu":
        res = mosaic_gpu_resources(kernel)
        warps, stages = res.num_warps, int(params.get("max_concurrent_steps") or 1)
        est_shared, est_regs = res.shared_bytes, res.registers
    else:
        warps, stages = int(params.get("num_warps") or 4), int(params.get("num_stages") or 3)
        est_shared, est_regs = _triton_shared_bytes(kernel, stages), 0
    if flops is None:
        flops, flops_source = _captured_flops(kernel, blocks)
    vector, trans = _elementwise(kernel, transcendentals)
    return GpuWork(blocks=blocks, flops=float(flops), dot_dtype=_dot_dtype(kernel),
                   hbm_bytes=float(_hbm_bytes(kernel)), num_warps=warps, num_stages=stages,
                   shared_bytes=est_shared if shared_bytes is None else shared_bytes,
                   registers=est_regs if registers is None else registers,
                   flops_source=flops_source, vector_ops=vector, transcendentals=trans,
                   compute_warpgroups=_compute_warpgroups(kernel, warpgroups),
                   ping_pong=backend == "mosaic_gpu" and syncs_warpgroups_by_named_barriers(kernel),
                   pipeline_steps=pipeline_steps)


def launch_work(launch: TritonLaunch, *, flops: float, flops_source: str,
                transcendentals: float = 0.0) -> GpuWork:
    """The work of a `jax_triton.triton_call` launch: its grid, warps, stages and arrays from
    the launch; its flops and transcendentals from the caller (the body is Triton's, not
    traced). Not compiled here: no shared memory or registers, so occupancy is the warps'."""
    return GpuWork(blocks=max(1, launch.programs), flops=float(flops),
                   dot_dtype=_narrowest_float(d for _, d in launch.inputs),
                   hbm_bytes=float(launch.hbm_bytes), num_warps=launch.num_warps,
                   num_stages=launch.num_stages, shared_bytes=0, registers=0,
                   flops_source=flops_source, transcendentals=float(transcendentals))


def gpu_prediction(kernel: Kernel, gpu: str = "h100", **given: Any) -> GpuPrediction:
    """Predicted time of a captured GPU kernel on `gpu` ("h100", "b200", "a100") and its bound;
    keyword arguments as `kernel_work` (the compiler's shared memory and registers)."""
    return predict_work(kernel_work(kernel, **given), gpu)


def _warpgroups(kernel: Kernel) -> int:
    if kernel.mesh is not None and kernel.mesh.warpgroups:
        return max(1, int(kernel.mesh.warpgroups[1]))
    return 1


def _compute_warpgroups(kernel: Kernel, warpgroups: int) -> int:
    """The warpgroups doing the math: a Mosaic GPU kernel of three or more warpgroups
    that lowers one warpgroup's registers specializes it as the producer that only issues TMA
    copies (the FlashAttention-3 layout, Shah et al. 2024, section 3.1: "producer" and
    "consumer" warpgroups, with `setmaxnreg`); the others compute. Triton: one."""
    if kernel.backend != "mosaic_gpu":
        return 1
    return max(1, warpgroups - 1) if lowers_producer_registers(kernel) else warpgroups


def _captured_flops(kernel: Kernel, blocks: int) -> tuple[float, str]:
    if kernel.cost_estimate is not None and kernel.cost_estimate.flops > 0:
        return float(kernel.cost_estimate.flops), "cost estimate"
    dots = sum(2.0 * m * k * n * c for m, k, n, c in _jax.kernel_body_dots(kernel))
    return dots * blocks, "body dots (loops of unknown trip count once)"


def _elementwise(kernel: Kernel, transcendentals: float | None) -> tuple[float, float]:
    """(elementwise results, transcendentals) of the whole kernel: the body's counts once per
    program; given the transcendentals (a loop of run-time trip count is counted once in the
    body), the elementwise results in the body's proportion to them."""
    body_vector, body_trans = kernel_body_vector_ops(kernel)
    if transcendentals is None or body_trans == 0:
        programs = max(1, kernel.programs or 1)
        return float(body_vector * programs), float(body_trans * programs)
    return transcendentals * body_vector / body_trans, float(transcendentals)


def _arrays(kernel: Kernel) -> list[Any]:
    return [o for o in kernel.operands if o.role in ("input", "output")]


def _hbm_bytes(kernel: Kernel) -> int:
    return sum(math.prod(o.shape) * o.dtype.itemsize for o in _arrays(kernel))


def _dot_dtype(kernel: Kernel) -> str:
    return _narrowest_float(o.dtype for o in kernel.operands if o.role == "input")


def _narrowest_float(dtypes: Iterable[Any]) -> str:
    """The narrowest float input dtype: the dots' operands (an f32 dot runs as TF32)."""
    floats = [d for d in dtypes
              if d.kind == "f" or d.name.startswith(("bfloat16", "float8"))]
    if not floats:
        return "float32"
    return min(floats, key=lambda d: d.itemsize).name


def _triton_shared_bytes(kernel: Kernel, stages: int) -> int:
    """A Triton block's shared memory: each dot's operand tiles, `num_stages` deep (Triton's
    software pipeline keeps that many loads in flight); elementwise kernels use none."""
    itemsize = min((o.dtype.itemsize for o in _arrays(kernel)), default=4)
    tiles = max(((m * k + k * n) for m, k, n, _ in _jax.kernel_body_dots(kernel)), default=0)
    return tiles * itemsize * stages

"""GPU occupancy: resident blocks per SM from shared memory, registers and warps (the CUDA
occupancy calculation), and a Mosaic GPU kernel's resources read off its capture."""

from __future__ import annotations

import dataclasses
import math

from pallaslab.analysis.occupancy import round_up
from pallaslab.model import Kernel, Operand, _jax


@dataclasses.dataclass(frozen=True)
class GpuLimits:
    """Per-SM limits of a GPU architecture (NVIDIA CUDA C Programming Guide, "Compute
    Capabilities" table: 8.0 for A100, 9.0 for H100)."""

    name: str
    compute_capability: tuple[int, int]
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_warps_per_sm: int
    registers_per_sm: int
    max_registers_per_thread: int
    register_allocation_unit: int  # registers, per warp
    shared_memory_per_sm: int  # bytes (the configurable maximum)
    max_shared_memory_per_block: int  # bytes (opt-in)
    reserved_shared_memory_per_block: int  # bytes the driver reserves per block


GPU_LIMITS = {
    "a100": GpuLimits("a100", (8, 0), 2048, 32, 64, 65536, 255, 256, 164 * 1024,
                      163 * 1024, 1024),
    "h100": GpuLimits("h100", (9, 0), 2048, 32, 64, 65536, 255, 256, 228 * 1024,
                      227 * 1024, 1024),
    "b200": GpuLimits("b200", (10, 0), 2048, 32, 64, 65536, 255, 256, 228 * 1024,
                      227 * 1024, 1024),
}


@dataclasses.dataclass(frozen=True)
class GpuOccupancy:
    gpu: str
    blocks_per_sm: int
    limited_by: str  # "warps", "registers", "shared memory", "blocks"
    warps_per_sm: int
    occupancy: float  # active warps / max warps

    @property
    def fits(self) -> bool:
        return self.blocks_per_sm > 0


def gpu_occupancy(shared_bytes: int, registers: int, num_warps: int,
                  gpu: str = "h100") -> GpuOccupancy:
    """Resident blocks per SM for a kernel using `shared_bytes` of shared memory per block and
    `registers` per thread with `num_warps` warps per block (the CUDA occupancy calculation)."""
    key = gpu.lower().removeprefix("gpu-")
    if key not in GPU_LIMITS:
        raise ValueError(f"unknown GPU {gpu!r}: known: {', '.join(GPU_LIMITS)}")
    lim = GPU_LIMITS[key]
    if num_warps <= 0:
        raise ValueError(f"num_warps must be positive, got {num_warps}")
    by_warps = lim.max_warps_per_sm // num_warps
    if registers > lim.max_registers_per_thread:
        by_regs = 0
    else:
        per_warp = round_up(max(registers, 1) * 32, lim.register_allocation_unit)
        by_regs = lim.registers_per_sm // (per_warp * num_warps)
    if shared_bytes > lim.max_shared_memory_per_block:
        by_smem = 0
    else:
        per_block = shared_bytes + lim.reserved_shared_memory_per_block
        by_smem = lim.shared_memory_per_sm // per_block
    limits = {"warps": by_warps, "registers": by_regs, "shared memory": by_smem,
              "blocks": lim.max_blocks_per_sm}
    limited_by = min(limits, key=lambda k: limits[k])
    blocks = limits[limited_by]
    return GpuOccupancy(key, blocks, limited_by, blocks * num_warps,
                        blocks * num_warps / lim.max_warps_per_sm)


# --- Mosaic GPU ---------------------------------------------------------------------------------

WARPGROUP_THREADS = 128  # a Mosaic GPU "thread" is a warpgroup: 4 warps
BARRIER_BYTES = 8  # an mbarrier is one 64-bit word of shared memory
# Mosaic GPU places each shared memory array at a 1024-byte aligned offset and the barriers
# together after them (checked with the real compile: 512 B + a barrier launch with 1032 B,
# 1024 B + two barriers with 1040 B).
SMEM_ALIGNMENT = 1024
# Addresses, indices, predicates (estimate; ptxas gives TMA copy kernels holding 2 words per
# thread 10 registers).
BASE_REGISTERS = 8
MOSAIC_GPU_MIN_CAPABILITY = (9, 0)  # TMA and mbarrier transaction counts: Hopper or newer


@dataclasses.dataclass(frozen=True)
class SharedBuffer:
    """One shared-memory allocation of a Mosaic GPU kernel (scratch or `run_scoped`)."""

    origin: str
    label: str  # the kernel's own name for it ("x_smem"), else the origin
    shape: tuple[int, ...]
    dtype: str  # "float32", or "barrier"
    nbytes: int


@dataclasses.dataclass(frozen=True)
class MosaicGpuResources:
    """What a Mosaic GPU block needs, read off the capture (no compile): its shared memory
    buffers and barriers, its warps, and an estimate of registers per thread."""

    buffers: tuple[SharedBuffer, ...]
    num_warps: int  # 4 per warpgroup (`num_threads`)
    registers: int  # estimate (see `register_basis`)
    register_basis: str

    @property
    def shared_bytes(self) -> int:
        """The launch's dynamic shared memory: each array at an aligned offset, then the
        barriers."""
        end = 0
        for b in self.buffers:
            if b.dtype != "barrier":
                end = round_up(end, SMEM_ALIGNMENT) + b.nbytes
        barriers = sum(b.nbytes for b in self.buffers if b.dtype == "barrier")
        return round_up(end, SMEM_ALIGNMENT) + barriers if barriers else end

    def occupancy(self, gpu: str) -> GpuOccupancy | str:
        """Blocks per SM on `gpu`, or why Mosaic GPU does not run there."""
        lim = GPU_LIMITS[gpu.lower().removeprefix("gpu-")]
        if lim.compute_capability < MOSAIC_GPU_MIN_CAPABILITY:
            cc = ".".join(map(str, lim.compute_capability))
            return (f"Mosaic GPU needs compute capability 9.0 or newer (TMA, mbarrier "
                    f"transaction counts); {lim.name} has {cc}")
        return gpu_occupancy(self.shared_bytes, self.registers, self.num_warps, lim.name)


def mosaic_gpu_resources(kernel: Kernel) -> MosaicGpuResources:
    """Shared memory buffers and barriers (scratch and `run_scoped`, at any depth), warps per
    block and a register estimate for a `plgpu.kernel` kernel."""
    buffers = tuple(_shared_buffer(op) for op in (*kernel.scratch, *kernel.scoped)
                    if op.memory_space == "smem")
    warpgroups = kernel.mesh.warpgroups[1] if kernel.mesh and kernel.mesh.warpgroups else 1
    largest = max((math.prod(shape) * dtype.itemsize
                   for shape, dtype, _ in _jax.kernel_body_values(kernel)), default=0)
    words = -(-largest // (4 * WARPGROUP_THREADS))  # 32-bit registers per thread
    registers = min(BASE_REGISTERS + 2 * words, 255)
    basis = (f"estimate: {BASE_REGISTERS} for addresses and indices + 2 x {words} for the "
             f"largest array value ({largest:,} B spread over a warpgroup's "
             f"{WARPGROUP_THREADS} threads, operand and result live together); ptxas decides")
    return MosaicGpuResources(buffers, 4 * warpgroups, registers, basis)


def _shared_buffer(op: Operand) -> SharedBuffer:
    count = math.prod(op.shape) if op.shape else 1
    barrier = op.value_type == "barrier"
    return SharedBuffer(op.origin, op.param or op.origin, op.shape,
                        "barrier" if barrier else op.dtype.name,
                        count * (BARRIER_BYTES if barrier else op.dtype.itemsize))

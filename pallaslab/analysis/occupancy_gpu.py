"""GPU occupancy: resident blocks per SM from shared memory, registers and warps (the CUDA
occupancy calculation)."""

from __future__ import annotations

import dataclasses

from pallaslab.analysis.occupancy import _round_up


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
        per_warp = _round_up(max(registers, 1) * 32, lim.register_allocation_unit)
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

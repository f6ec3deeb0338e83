"""TPU chips as data: JAX's own chip facts plus what we measured with the real compiler.

Capacities, bandwidth, peak throughput and native tiling come from JAX's own TPU chip facts
(through `pallaslab.model._jax`); we do not copy that table. What JAX does not record is the
*default scoped-VMEM limit* the compiler applies when a kernel sets no `vmem_limit_bytes`:
those we measured with libtpu (`DEFAULT_SCOPED_VMEM`, re-checked by
tests/analysis/test_vmem_fidelity.py on every libtpu it runs with).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from pallaslab.model import _jax

MiB = 1 << 20

# Measured with libtpu 0.0.52 (jax 0.12.0.1) by AOT-compiling a kernel with no
# `vmem_limit_bytes` for each topology: the E1001 CompileTimeScopedVmemOom diagnostic reports
# "limit 16.00M" (v5e, v5p) / "limit 32.00M" (v6e, 7x); a kernel needing exactly that many bytes
# compiles and one needing 8 KiB more does not. v4's limit is its whole 16 MiB VMEM.
DEFAULT_SCOPED_VMEM_LIBTPU = "0.0.52"
DEFAULT_SCOPED_VMEM: dict[str, int] = {
    "v4": 16 * MiB,
    "v5e": 16 * MiB,
    "v5p": 16 * MiB,
    "v6e": 32 * MiB,
    "7x": 32 * MiB,
}

# VMEM libtpu 0.0.52 keeps for itself: a kernel's buffers may use the chip's VMEM (JAX's
# `vmem_capacity_bytes`) minus this, whatever `vmem_limit_bytes` says. Measured with 4 pipeline
# buffers and vmem_limit_bytes above the VMEM: 64 MiB - 64 KiB compiles on v5p and 7x and
# 16 KiB more does not ("Used 63.95M of 63.94M vmem"), 128 MiB - 64 KiB on v6e; v5e and v4
# compile their whole 128 / 16 MiB (tests/analysis/test_findings_vs_compiler.py re-checks 7x).
VMEM_RESERVED: dict[str, int] = {
    "v4": 0,
    "v5e": 0,
    "v5p": 64 * 1024,
    "v6e": 64 * 1024,
    "7x": 64 * 1024,
}

# Our chip names -> (jax tpu_info ChipVersion value, libtpu topology for a 1-chip AOT compile,
# device_kind). The topologies are the ones `jax.experimental.topologies.get_topology_desc`
# accepts with libtpu 0.0.52.
_CHIPS: dict[str, tuple[str, str, str]] = {
    "v4": ("v4", "v4:2x2x1", "TPU v4"),
    "v5e": ("v5e", "v5e:1x1", "TPU v5 lite"),
    "v5p": ("v5p", "v5p:2x2x1", "TPU v5"),
    "v6e": ("v6e", "v6e:1x1", "TPU v6 lite"),
    "7x": ("7x", "tpu7x:2x2x1", "TPU7x"),
}
_ALIASES = {"v7x": "7x", "tpu7x": "7x", "v5litepod": "v5e", "v6litepod": "v6e"}

DEFAULT_CHIPS = ("v5e", "v6e")

# ALUs per (sublane, lane) slot of the VPU: "each (lane, sublane) pair on v5 contains 4 standard
# floating-point ALUs", each doing one elementwise op per cycle on a (8, 128) vector register
# ("How to Scale Your Model", ch. "All About TPUs", jax-ml.github.io/scaling-book/tpus/). No
# other generation's figure is public; we use it for all.
VPU_ALUS = 4


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation, per TensorCore (a kernel runs on one TensorCore)."""

    name: str  # "v5e"
    target: str  # "tpu-v5e" (the `lower --target` / inspect `vmem` key spelling)
    topology: str  # libtpu topology for AOT compiles, e.g. "v5e:1x1"
    device_kind: str
    generation: int
    vmem_capacity: int
    vmem_usable: int  # what the compiler lets a kernel's buffers use (capacity - reserved)
    smem_capacity: int
    default_scoped_vmem: int  # the compiler's limit when a kernel sets no vmem_limit_bytes
    hbm_bandwidth: float  # bytes / s
    bf16_flops: float  # ops / s (a multiply-add counts 2)
    int8_ops: float
    lanes: int
    sublanes: int
    mxu_size: int
    # elementwise ops / s of the vector unit: clock x sublanes x lanes x VPU_ALUS (see `chip`)
    vpu_ops: float
    sublane_tiling: tuple[tuple[int, int], ...]  # (bits, rows of the native VMEM tile)
    # TensorCores one JAX device drives: 2 on a megacore chip (v4, v5p: a kernel's leading
    # "parallel" grid dimension is split between them), else 1 (7x shows each core as its own
    # device). From JAX's `ChipVersion.supports_megacore` / `num_physical_tensor_cores_per_chip`.
    cores: int = 1
    # SparseCore: VMEM per vector subcore (TileSPMEM), subcores per SparseCore, SparseCores
    # per chip (None / 0 where the chip has none)
    sparse_core_vmem: int | None = None
    sparse_subcores: int = 0
    sparse_cores: int = 0

    def tile_rows(self, dtype: np.dtype) -> int:
        """Rows of the chip's large native tile for a dtype: f32 8, bf16 8 (16 on 7x), int8 32."""
        return self.tile_rows_for_bits(np.dtype(dtype).itemsize * 8)

    def tile_rows_for_bits(self, bits: int) -> int:
        return dict(self.sublane_tiling).get(bits, self.sublanes)

    def peak_flops(self, dtype: np.dtype | None = None) -> float:
        if dtype is not None and np.dtype(dtype).itemsize == 1 and self.int8_ops:
            return self.int8_ops
        return self.bf16_flops


def chip_names() -> tuple[str, ...]:
    return tuple(_CHIPS)


def normalize(name: str) -> str:
    """'tpu-v5e', 'v5e', 'TPU v5 lite' -> 'v5e'."""
    text = name.strip()
    for chip, (_, _, kind) in _CHIPS.items():
        if text == kind:
            return chip
    text = text.lower().removeprefix("tpu-").removeprefix("tpu ")
    text = _ALIASES.get(text, text)
    if text not in _CHIPS:
        known = ", ".join(_CHIPS)
        raise ValueError(f"unknown TPU chip {name!r}: known chips are {known} "
                         "(also spelled 'tpu-v5e')")
    return text


@functools.cache
def chip(name: str) -> Chip:
    """The facts of a TPU chip by name ('v5e', 'tpu-v6e', ...)."""
    key = normalize(name)
    version, topology, kind = _CHIPS[key]
    facts = _jax.tpu_chip_facts(version)
    return Chip(
        name=key,
        target=f"tpu-{key}",
        topology=topology,
        device_kind=kind,
        generation=int(facts["generation"]),
        vmem_capacity=int(facts["vmem_capacity_bytes"]),
        vmem_usable=int(facts["vmem_capacity_bytes"]) - VMEM_RESERVED[key],
        smem_capacity=int(facts["smem_capacity_bytes"]),
        default_scoped_vmem=DEFAULT_SCOPED_VMEM[key],
        hbm_bandwidth=float(facts["mem_bw_bytes_per_second"]),
        bf16_flops=float(facts["bf16_ops_per_second"]),
        int8_ops=float(facts["int8_ops_per_second"]),
        lanes=int(facts["num_lanes"]),
        sublanes=int(facts["num_sublanes"]),
        mxu_size=int(facts["mxu_column_size"]),
        vpu_ops=clock_hz(facts) * int(facts["num_sublanes"]) * int(facts["num_lanes"]) * VPU_ALUS,
        sublane_tiling=tuple(sorted(facts["sublane_tiling"].items())),
        cores=int(facts["physical_cores"]) if facts["megacore"] else 1,
        sparse_core_vmem=sc["vmem_bytes"] if (sc := facts["sparse_core"]) else None,
        sparse_subcores=sc["subcores"] if sc else 0,
        sparse_cores=sc["cores"] if sc else 0,
    )


def clock_hz(facts: dict[str, Any]) -> float:
    """The TensorCore clock implied by the peak: each MXU is an s x s array of multiply-adds,
    one each per cycle ("16K multiply-accumulate operations per cycle" for 128 x 128, Google
    Cloud TPU system architecture; v6e: "two 256x256 MXUs", cloud.google.com/tpu/docs/v6e), so
    clock = bf16 ops/s / (2 x MXUs x s^2), with JAX's `num_mxus` (4 on v5e/v5p, as Google's
    v5e page says; 2 on v6e/7x): 1.5 GHz v5e, 1.75 GHz v5p, 3.5 GHz v6e, 4.4 GHz 7x. No
    clock is published for v6e/7x; this is the one their peak and MXU count imply."""
    s = int(facts["mxu_column_size"])
    return float(facts["bf16_ops_per_second"]) / (2 * int(facts["num_mxus"]) * s * s)

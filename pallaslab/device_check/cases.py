"""The kernels the device check runs: the GPU catalog's cases (`file.py:function`, relative to
the repository root), each with the GPUs it applies to."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any


@dataclasses.dataclass(frozen=True)
class CheckCase:
    spec: str  # "tests/kernels_gpu.py:masked_vector_add"
    min_capability: tuple[int, int] | None = None  # the oldest GPU it compiles for
    major_only: int | None = None  # the one GPU generation it compiles for (wgmma: Hopper)

    @property
    def name(self) -> str:
        return self.spec.rpartition(":")[2]

    def skip_reason(self, capability: tuple[int, int] | None) -> str | None:
        """Why the kernel cannot compile for a GPU of this compute capability (None: it can,
        or the capability is unknown and the device run will say)."""
        if capability is None:
            return None
        if self.major_only is not None and capability[0] != self.major_only:
            return (f"{self.name} uses instructions of compute capability {self.major_only}.x "
                    f"only (Hopper's warpgroup MMA); this GPU is {capability[0]}.{capability[1]}")
        if self.min_capability is not None and capability < self.min_capability:
            need = ".".join(map(str, self.min_capability))
            return (f"{self.name} needs compute capability {need} or newer (Mosaic GPU: TMA, "
                    f"barriers); this GPU is {capability[0]}.{capability[1]}")
        return None


HOPPER = (9, 0)
TRITON = tuple(CheckCase(f"tests/kernels_gpu.py:{n}") for n in (
    "masked_vector_add", "masked_row_softmax", "atomic_block_sums", "atomic_exchange",
    "overlapping_stores")) + tuple(CheckCase(f"tests/peer/gpu_triton.py:{n}") for n in (
        "triton_blockspec_matmul", "triton_grouped_matmul"))
MOSAIC_GPU = tuple(CheckCase(f"tests/kernels_mgpu.py:{n}", HOPPER) for n in (
    "tma_scale", "tma_blocks", "warp_specialized", "gpu_emit_pipeline",
    "gpu_emit_pipeline_out_specs"))
WGMMA = tuple(CheckCase(f"tests/peer/gpu_mosaic.py:{n}", HOPPER, major_only=9) for n in (
    "mgpu_wgmma", "mgpu_pipelined_wgmma"))
DEFAULT_CASES = (*TRITON, *MOSAIC_GPU, *WGMMA)


def case_for(spec: str) -> CheckCase:
    """A catalog case by its spec (with its GPU requirements), or any other case as given."""
    return next((c for c in DEFAULT_CASES if c.spec == spec), CheckCase(spec))


def registered_reference(name: str) -> Any:
    """The pure-JAX reference a catalog or peer case registered (`@case(reference=...)` in
    tests/catalog.py, `@peer(reference=...)` in tests/peer/registry.py), once its file is
    loaded; None when it has none."""
    catalog = sys.modules.get("catalog")
    entry = getattr(catalog, "CATALOG", {}).get(name)
    if entry is not None and entry.reference is not None:
        return entry.reference
    registry = sys.modules.get("registry")
    peer = getattr(registry, "PEERS", {}).get(name)
    return None if peer is None else peer.reference

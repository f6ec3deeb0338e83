"""One kernel's inspection (tiling + findings) and its stable JSON form (`inspect --json`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pallaslab.analysis.findings import Finding, Rules, find
from pallaslab.analysis.occupancy import DEFAULT_CHIPS, vmem_findings, vmem_section
from pallaslab.analysis.tiling import Tiling, tile
from pallaslab.model import Capture, Kernel

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class KernelInspection:
    kernel: Kernel
    tiling: Tiling | None
    findings: tuple[Finding, ...]
    vmem: dict[str, Any] = dataclasses.field(default_factory=dict)  # per TPU chip

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")


def inspect_kernel(
    kernel: Kernel, *, backend: str | None = None, chips: Sequence[str] = DEFAULT_CHIPS
) -> KernelInspection:
    """Tiling, findings and (for TPU kernels) VMEM occupancy on `chips` ("v5e", "v6e", ...)."""
    tiling = tile(kernel)
    findings = find(kernel, tiling, backend=backend)
    vmem: dict[str, Any] = {}
    if Rules.for_kernel(kernel, backend).tpu and chips:
        vmem = vmem_section(kernel, chips)
        findings += vmem_findings(kernel, chips)
    return KernelInspection(kernel, tiling, findings, vmem)


def inspect_capture(
    cap: Capture, *, backend: str | None = None, chips: Sequence[str] = DEFAULT_CHIPS
) -> tuple[KernelInspection, ...]:
    return tuple(inspect_kernel(k, backend=backend, chips=chips) for k in cap)


def kernel_json(insp: KernelInspection) -> dict[str, Any]:
    """The contract's per-kernel object (design.md, `pallaslab inspect --json`)."""
    k = insp.kernel
    return {
        "name": k.name,
        "source": _short_source(k.source),
        "call_site": _short_source(k.call_site),
        "kind": k.kind,
        "backend": k.backend,
        "context": list(k.context),
        "grid": [g if g is not None else None for g in k.grid],
        "programs": k.programs,
        "dimension_semantics": list(k.dimension_semantics) if k.dimension_semantics else None,
        "operands": [_operand_json(insp, op) for op in k.operands],
        "findings": [f.to_json() for f in insp.findings],
        "vmem": insp.vmem,
    }


def _operand_json(insp: KernelInspection, op: Any) -> dict[str, Any]:
    ot = insp.tiling.operands.get(op.origin) if insp.tiling is not None else None
    return {
        "origin": op.origin,
        "role": op.role,
        "shape": list(op.shape),
        "dtype": str(op.dtype),
        "block_shape": list(op.block_shape) if op.block_shape is not None else None,
        "memory_space": op.memory_space,
        "buffer_count": op.buffer_count,
        "fetches": ot.fetches if ot is not None else None,
        "hbm_bytes": ot.hbm_bytes if ot is not None else None,
        "scalar_prefetch": op.scalar_prefetch,
        "aliased_with": op.aliased_with,
    }


def _short_source(source: str | None) -> str | None:
    """'/long/path/file.py:12' -> 'file.py:12' (the contract's form)."""
    if source is None:
        return None
    return source.rsplit("/", 1)[-1]


def capture_json(inspections: tuple[KernelInspection, ...]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "kernels": [kernel_json(i) for i in inspections]}

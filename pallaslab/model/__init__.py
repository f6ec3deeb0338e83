"""The center of pallaslab: frozen descriptions of captured kernels (and the jax compat layer)."""

from pallaslab.model.capture import capture, recapture, select_kernel
from pallaslab.model.kernel import (
    BlockDim,
    Capture,
    CostEstimate,
    DmaCopy,
    Kernel,
    MeshInfo,
    Operand,
    SemaphoreOp,
)

__all__ = [
    "BlockDim",
    "Capture",
    "CostEstimate",
    "DmaCopy",
    "Kernel",
    "MeshInfo",
    "Operand",
    "SemaphoreOp",
    "capture",
    "recapture",
    "select_kernel",
]

"""The center of pallaslab: frozen descriptions of captured kernels (and the jax compat layer)."""

from pallaslab.model.capture import capture, select_kernel
from pallaslab.model.kernel import (
    BlockDim,
    Capture,
    CostEstimate,
    Kernel,
    MeshInfo,
    Operand,
)

__all__ = [
    "BlockDim",
    "Capture",
    "CostEstimate",
    "Kernel",
    "MeshInfo",
    "Operand",
    "capture",
    "select_kernel",
]

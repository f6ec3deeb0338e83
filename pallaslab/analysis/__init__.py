"""Pure analyses of captured kernels: whole-grid tiling and findings."""

from pallaslab.analysis.findings import Finding, find
from pallaslab.analysis.inspection import KernelInspection, inspect_capture, inspect_kernel
from pallaslab.analysis.tiling import OperandTiling, Tiling, tile

__all__ = [
    "Finding",
    "KernelInspection",
    "OperandTiling",
    "Tiling",
    "find",
    "inspect_capture",
    "inspect_kernel",
    "tile",
]

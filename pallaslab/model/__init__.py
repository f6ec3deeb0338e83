"""The center of pallaslab: frozen descriptions of captured kernels.

- `capture`: `capture()` (trace a call, nothing runs), `recapture()` (trace it again under
  another chip's abstract TPU), `select_kernel()`;
- `kernel`: the frozen dataclasses (`Capture`, `Kernel`, `Operand`, `BlockDim`, `DmaCopy`,
  `SemaphoreOp`, `MeshInfo`, `CostEstimate`) every other layer reads;
- `devices`: what a multi-device run did, device by device (DMAs, semaphore operations);
- `_jax`: the compat layer, the only code of pallaslab that imports JAX's private modules.

It imports nothing of pallaslab but itself, `pallaslab.errors` and `pallaslab.util`.
"""

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

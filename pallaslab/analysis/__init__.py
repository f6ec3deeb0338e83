"""Pure analyses of captured kernels: functions of a `Kernel`, no execution, no widgets.

- `tiling`: every operand's block index for every program, vectorized, and fetch counts;
- `coverage`, `output_writes`: which output blocks the programs write;
- `finding` (the `Finding` record), `findings` (the TPU and whole-grid rules and their stable
  codes), `tpu_operand_rules` (Mosaic's BlockSpec rules on one operand), `vmem_findings`,
  `gpu_stores` (GPU loads and stores outside their arrays);
- `occupancy`, `occupancy_gpu`, `chips`: VMEM/SMEM per TPU chip, GPU resources, chip facts;
- `pipeline` (the TPU software-pipeline model), `cost`, `whatif` (block-size what-if);
- `inspection`: one kernel's tiling, findings and VMEM, and its `inspect --json` form.

Depends on `pallaslab.model` only (never on `execute`, `views` or `lowering`).
"""

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

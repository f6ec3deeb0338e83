"""The kernel's own static error findings that a comparison must count: those meaning that
the interpreted run's result is not what the hardware computes, so two executors (or an
executor and the reference) can agree on a kernel that is wrong on a TPU or GPU.

- `block-out-of-bounds`: interpret mode wraps a negative block index Python-style and clamps
  one past the end, so it reads (or writes) a block inside the array where the hardware reads
  outside it: the run can look right on every interpreter but tpu-interpret, which stops.
- `output-revisit` (TPU): the interpreters write outputs in place; on TPU a revisited output
  block is not re-read from HBM, so the later write-back clobbers the earlier result.
- `out-of-bounds-access` (GPU, whole-array refs): JAX's interpreters clamp a load or store
  past the array's end, so the run can match the reference where a GPU faults.
- `parallel-write-conflict`, GPU kernels only: every GPU runs programs concurrently, so
  programs writing the same block race on every GPU, while interpreters run them in turn. On
  TPU the same finding depends on the chip: v5e and v6e have one TensorCore and run
  "parallel" dimensions in turn (the interpreted result *is* theirs), megacore chips may split
  them; tpu-interpret runs two cores and judges that at run time, `pallaslab check` statically.

Not counted: `uncovered-output` (the run shows it: unwritten elements hold the fill and fail
the comparison), block-shape, buffer-count and VMEM findings (whether it compiles: `pallaslab
check` / `lower`), warnings and infos.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pallaslab.analysis.findings import (
    Finding,
    Rules,
    out_of_bounds,
    output_revisits,
    parallel_write_conflicts,
)
from pallaslab.analysis.tiling import Tiling
from pallaslab.model import Kernel

# What the interpreters do instead of what the hardware does, said once per code.
WHY_THE_RUN_AGREES = {
    "block-out-of-bounds": "interpret mode wraps a negative block index and clamps one past the "
                           "end, so the run reads a block inside the array where a TPU/GPU "
                           "reads outside it",
    "output-revisit": "the interpreters write outputs in place, where a TPU writes a revisited "
                      "block back over the earlier result",
    "parallel-write-conflict": "the interpreters run the programs one after the other, where "
                               "a GPU runs them at once",
    "out-of-bounds-access": "JAX's interpreters clamp a load or store that reaches past its "
                            "array back inside it, where a GPU faults or corrupts memory",
}


@dataclasses.dataclass(frozen=True)
class StaticFinding:
    """An error finding of the static analysis (as `pallaslab check`), on one kernel."""

    kernel: int  # the kernel's launch index in the capture
    name: str  # its name
    finding: Finding

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "name": self.name, **self.finding.to_json()}


def hardware_findings(kernel: Kernel, tiling: Tiling | None) -> tuple[StaticFinding, ...]:
    """`kernel`'s error findings that an interpreted run cannot show (see the module's
    docstring), from the tiling the comparison already has (None: none)."""
    if tiling is None:
        return ()
    rules = Rules.for_kernel(kernel)
    found = [*out_of_bounds(kernel, tiling, rules), *output_revisits(kernel, tiling, rules)]
    if rules.gpu:  # (for whole-array refs, the loads and stores: accesses past the arrays too)
        found += [f for f in parallel_write_conflicts(kernel, tiling, rules)
                  if f.code in WHY_THE_RUN_AGREES]
    return tuple(StaticFinding(kernel.index, kernel.name, f) for f in found
                 if f.severity == "error")


def why_the_runs_agree(found: tuple[StaticFinding, ...]) -> tuple[str, ...]:
    """One note per code found: why the runs can agree although the kernel is wrong."""
    codes = dict.fromkeys(s.finding.code for s in found)
    return tuple(f"{code} (static analysis, as `pallaslab check`): {WHY_THE_RUN_AGREES[code]}; "
                 "the comparison counts it as an error" for code in codes
                 if code in WHY_THE_RUN_AGREES)

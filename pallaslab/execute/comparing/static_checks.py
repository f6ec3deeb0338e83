"""The kernel's static error findings that a comparison counts: exactly the errors `pallaslab
check` reports for the same kernel with no `--target` (its own backend, the default chips),
from the same function (`pallaslab.analysis.inspection.inspect_capture`), so that `compare`
never passes a kernel `check` fails.

Most of them are findings an interpreted run cannot show, because the interpreters do not do
what the hardware does: two executors (or an executor and the reference) can agree on a kernel
that is wrong on a TPU or GPU. The notes say why, per code (`WHY_THE_RUN_AGREES`):

- `block-out-of-bounds`: interpret mode wraps a negative block index Python-style and clamps
  one past the end, so it reads (or writes) a block inside the array where the hardware reads
  outside it: the run can look right on every interpreter but tpu-interpret, which stops.
- `output-revisit` (TPU): the interpreters write outputs in place; on TPU a revisited output
  block is not re-read from HBM, so the later write-back clobbers the earlier result.
- `out-of-bounds-access` (GPU, whole-array refs): JAX's interpreters clamp a load or store
  past the array's end, so the run can match the reference where a GPU faults.
- `unwaited-copy`, `uncommitted-smem` (Mosaic GPU): JAX's GPU interpreter lands TMA copies
  and SMEM writes at once, so reading before `barrier_wait` or copying out before
  `commit_smem` looks right there.
- `parallel-write-conflict`: the interpreters (and `vectorized`, which batches only what is
  provably equivalent) run the programs one after the other, where a GPU runs them at once and
  a TPU may split "parallel" dimensions between its cores.

The others (uncovered output, block shapes, VMEM, ...) are errors of `check` too, and counted
for the same reason: one kernel, one verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pallaslab.analysis.findings import Finding
from pallaslab.analysis.inspection import KernelInspection
from pallaslab.execute.result import RunResult
from pallaslab.model import Kernel

# What the interpreters do instead of what the hardware does, said once per code.
WHY_THE_RUN_AGREES = {
    "block-out-of-bounds": "interpret mode wraps a negative block index and clamps one past the "
                           "end, so the run reads a block inside the array where a TPU/GPU "
                           "reads outside it",
    "output-revisit": "the interpreters write outputs in place, where a TPU writes a revisited "
                      "block back over the earlier result",
    "parallel-write-conflict": "the executors run the programs one after the other, where a "
                               "GPU runs them at once and a TPU may split \"parallel\" "
                               "dimensions between its cores",
    "out-of-bounds-access": "JAX's interpreters clamp a load or store that reaches past its "
                            "array back inside it, where a GPU faults or corrupts memory",
    "unwaited-copy": "JAX's GPU interpreter lands a TMA copy at once, so SMEM read before its "
                     "barrier_wait already holds the data, where a GPU may read stale SMEM",
    "uncommitted-smem": "JAX's GPU interpreter sees the threads' SMEM writes at once, where a "
                        "GPU's TMA copy may read SMEM before commit_smem makes them visible",
}


@dataclasses.dataclass(frozen=True)
class StaticFinding:
    """An error finding of the static analysis (as `pallaslab check`), on one kernel."""

    kernel: int  # the kernel's launch index in the capture
    name: str  # its name
    finding: Finding

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "name": self.name, **self.finding.to_json()}


def check_errors(inspection: KernelInspection) -> tuple[StaticFinding, ...]:
    """The kernel's error findings, as `pallaslab check` (no `--target`) reports them."""
    kernel: Kernel = inspection.kernel
    return tuple(StaticFinding(kernel.index, kernel.name, f) for f in inspection.errors)


def unreported_errors(inspections: Sequence[KernelInspection], results: Sequence[RunResult]
                      ) -> tuple[StaticFinding, ...]:
    """The kernels' `check_errors` that no run already reported (tpu-interpret reports an
    output revisit itself)."""
    reported = {(f.code, f.operand) for r in results for f in r.findings}
    return tuple(s for insp in inspections for s in check_errors(insp)
                 if (s.finding.code, s.finding.operand) not in reported)


def why_the_runs_agree(found: tuple[StaticFinding, ...]) -> tuple[str, ...]:
    """One note per code found: why the runs can agree although the kernel is wrong."""
    codes = dict.fromkeys(s.finding.code for s in found)
    return tuple(f"{code} (static analysis, as `pallaslab check`): "
                 f"{WHY_THE_RUN_AGREES.get(code, 'an error `pallaslab check` reports')}; "
                 "the comparison counts it as an error" for code in codes)

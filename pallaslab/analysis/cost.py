"""How much work one grid step of a kernel does: flops from the kernel jaxpr or the user's
`cost_estimate`.

Flops are counted with Pallas's own per-primitive cost rules over the kernel body (a dot of
(m, k) x (k, n) is 2mkn); `pl.when` branches count as taken, loop bodies times their trip
count. A user's `pl.CostEstimate` on the `pallas_call` wins: it is the whole call's cost, so
it is spread evenly over the grid.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from pallaslab.model import Kernel, _jax


@dataclasses.dataclass(frozen=True)
class StepCost:
    flops: float  # per grid step
    transcendentals: float
    source: Literal["cost_estimate", "jaxpr"]


def step_cost(kernel: Kernel) -> StepCost:
    programs = max(1, kernel.programs or 1)
    if kernel.cost_estimate is not None and kernel.cost_estimate.flops > 0:
        ce = kernel.cost_estimate
        return StepCost(ce.flops / programs, ce.transcendentals / programs, "cost_estimate")
    flops, trans = _jax.kernel_body_cost(kernel)
    return StepCost(float(flops), float(trans), "jaxpr")

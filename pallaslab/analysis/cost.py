"""How much work one grid step of a kernel does: flops from the kernel jaxpr or the user's
`cost_estimate`, and how much of the MXU its matmuls can use.

Flops are counted with Pallas's own per-primitive cost rules over the kernel body (a dot of
(m, k) x (k, n) is 2mkn); `pl.when` branches count as taken, loop bodies times their trip
count. A user's `pl.CostEstimate` on the `pallas_call` wins: it is the whole call's cost, so
it is spread evenly over the grid.

The MXU is a weight-stationary systolic array of `s x s` cells (s = `mxu_column_size`, 128 on
v5e/v5p, 256 on v6e/7x; JAX's TPU facts and Google's TPU system-architecture pages): a dot
holds `s x s` tiles of its (k, n) operand and streams its m rows through them, so k and n are
padded up to multiples of s, and a tile with fewer than s rows still pays the s cycles of
loading its weights. `mxu_padding` is that padded work over the real dot flops (>= 1).

Everything else the body computes on arrays (softmax's max, exp, sum and scaling, masks,
casts) runs on the vector unit, one op per element: `vector_ops`, counted from the jaxpr even
when a `cost_estimate` gives the flops (those are the dots' and the VPU's together); the
MXU's share is the body's dots where it has any.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from pallaslab.model import Kernel, _jax
from pallaslab.model._jax.chips import kernel_body_vector_ops


@dataclasses.dataclass(frozen=True)
class StepCost:
    flops: float  # per grid step
    transcendentals: float
    source: Literal["cost_estimate", "jaxpr"]
    mxu_padding: float = 1.0  # MXU cycles spent / cycles the real dot flops need
    vector_ops: float = 0.0  # per grid step: elementwise ops on the VPU
    dot_flops: float | None = None  # per grid step: the dots' flops (None: all of `flops`)

    @property
    def mxu_flops(self) -> float:
        return self.flops if self.dot_flops is None else self.dot_flops


def step_cost(kernel: Kernel, mxu_size: int | None = None) -> StepCost:
    programs = max(1, kernel.programs or 1)
    padding = mxu_padding(kernel, mxu_size) if mxu_size else 1.0
    vector, _ = kernel_body_vector_ops(kernel)
    dots = sum(2.0 * m * k * n * count for m, k, n, count in _jax.kernel_body_dots(kernel))
    if kernel.cost_estimate is not None and kernel.cost_estimate.flops > 0:
        ce = kernel.cost_estimate
        # The MXU time still comes from the body's own dots where it has any: a whole-call
        # estimate spread evenly over the grid misplaces work a kernel skips (splash
        # attention's causal estimate counts the masked-out blocks its grid never runs).
        return StepCost(ce.flops / programs, ce.transcendentals / programs, "cost_estimate",
                        padding, float(vector), dots or None)
    flops, trans = _jax.kernel_body_cost(kernel)
    return StepCost(float(flops), float(trans), "jaxpr", padding, float(vector),
                    dots if kernel.handle is not None else None)


def mxu_padding(kernel: Kernel, mxu_size: int) -> float:
    """Padded MXU work of the kernel body's dots over their real flops (1.0 without dots)."""
    real = padded = 0.0
    for m, k, n, count in _jax.kernel_body_dots(kernel):
        real += 2.0 * m * k * n * count
        padded += 2.0 * padded_dot(m, k, n, mxu_size) * count
    return padded / real if real > 0 else 1.0


def padded_dot(m: int, k: int, n: int, s: int) -> int:
    """Multiply-adds the MXU spends on an (m, k) x (k, n) dot: k and n in whole s x s weight
    tiles, m in whole 8-row sublane groups and at least s rows per weight tile."""
    rows = max(math.ceil(m / 8) * 8, s)
    return rows * math.ceil(k / s) * s * math.ceil(n / s) * s

"""Whether a Mosaic GPU kernel specializes its warpgroups (a producer and consumers)."""

from __future__ import annotations

from typing import Any

from pallaslab.model import Kernel
from pallaslab.model._jax.chips import body_jaxprs
from pallaslab.model._jax.trace import all_sub_jaxprs


def lowers_producer_registers(kernel: Kernel) -> bool:
    """Does the body give a warpgroup fewer registers (`plgpu.set_max_registers(...,
    action="decrease")`, PTX `setmaxnreg.dec`)? That is the warp-specialized layout: one
    producer warpgroup issues the copies and hands its registers to the compute ones."""
    return any(_decreases(j) for j in body_jaxprs(kernel))


def _decreases(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "set_max_registers" and eqn.params.get("action") == "decrease":
            return True
        if any(_decreases(getattr(s, "jaxpr", s)) for s in all_sub_jaxprs(eqn.params)):
            return True
    return False


def syncs_warpgroups_by_named_barriers(kernel: Kernel) -> bool:
    """Does the body sync warpgroups on named barriers (PTX `bar.sync` / `bar.arrive`,
    through `inline_mgpu`: Mosaic GPU's `_bar_operation`)? FlashAttention-3's ping-pong
    schedule between compute warpgroups is made of them (Shah et al. 2024, section 3.1)."""
    return any(_named_barriers(j) for j in body_jaxprs(kernel))


def _named_barriers(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "inline_mgpu":
            fn = eqn.params.get("mgpu_fn")
            if "_bar_operation" in getattr(fn, "__qualname__", ""):
                return True
        if any(_named_barriers(getattr(s, "jaxpr", s)) for s in all_sub_jaxprs(eqn.params)):
            return True
    return False

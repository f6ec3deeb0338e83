"""Imports from jax._src, the version gate, kernel primitives and the opaque handles."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from jax._src import core as jax_core
from jax._src.pallas import mpmd as pallas_mpmd
from jax._src.pallas import pallas_call as pallas_call_mod

from pallaslab.errors import UntestedJaxWarning
from pallaslab.model._jax.arguments import argument_positions
from pallaslab.model._jax.compiled import PerObject
from pallaslab.model._jax.versions import untested_jax_warning

# Once per process (a module runs once): a JAX outside the tested releases is named.
if (_untested := untested_jax_warning()) is not None:  # pragma: no cover - tested JAX in CI
    warnings.warn(_untested, UntestedJaxWarning, stacklevel=2)

Jaxpr = jax_core.Jaxpr
_JAXPR_TEXTS: PerObject[str] = PerObject()


def jaxpr_text(jaxpr: Any) -> str:
    """`str(jaxpr)`, kept per jaxpr object: printing a repeated capture's kernel and
    index-map jaxprs again was half of a warm capture."""
    return _JAXPR_TEXTS.get(jaxpr, str)


PALLAS_CALL = pallas_call_mod.pallas_call_p
MPMD_MAP = pallas_mpmd.mpmd_map_p
KERNEL_PRIMITIVES = (PALLAS_CALL, MPMD_MAP)
# Primitives that call their sub-jaxpr exactly once with the same operands: values flow through.
CALL_ONCE = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
              "custom_vmap_call", "remat", "checkpoint", "custom_lin"}
CONTEXT_NAMES = {"pjit": "jit", "closed_call": "call", "custom_jvp_call": "custom_jvp",
                  "custom_vjp_call": "custom_vjp", "checkpoint": "remat",
                  # plgpu.kernel wraps every launch in custom_vmap: not the user's doing.
                  "custom_vmap_call": ""}


@dataclasses.dataclass(frozen=True)
class KernelHandle:
    """What executors and lowering need to re-run a captured kernel: the equation itself."""

    eqn: Any
    index_map_evaluator: Callable[[np.ndarray, Sequence[np.ndarray]], list[np.ndarray]] | None
    num_dynamic_grid: int
    prefetch_concrete: bool

    @property
    def primitive(self) -> str:
        return self.eqn.primitive.name


@dataclasses.dataclass(frozen=True)
class CaptureHandle:
    """The traced call: its jaxpr and flat arguments, and what re-tracing it needs."""

    closed_jaxpr: Any
    flat_args: tuple[Any, ...]
    # The traced function (array-free arguments bound) and its array arguments, so lowering can
    # re-trace it under each target's abstract TPU (`pallaslab.model.capture.recapture`).
    fn: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The TPU chip ("v5e") whose abstract device the call was traced under; None: traced as is.
    traced_for_chip: str | None = None
    # Why, where the kernel's own code asked (its device kind); None: JAX's questions or none.
    traced_for_chip_because: str | None = None
    # The same call traced with the `emit_pipeline` primitive (None when no kernel body uses
    # emit_pipeline): read for nested pipelines only, since JAX's TPU interpreter cannot run it
    # off a TPU.
    structure_jaxpr: Any = None

    def argument_positions(self, kernel: KernelHandle, input_origins: Sequence[str]
                           ) -> dict[str, int]:
        """Input origin -> position among the call's flat arguments, for the kernel's inputs
        (`input_origins`, in operand order) that are one of those arguments unchanged."""
        return argument_positions(self.closed_jaxpr, kernel.eqn, input_origins,
                                  kernel.num_dynamic_grid)

"""Imports from jax._src, the version gate, kernel primitives and the opaque handles."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax._src import core as jax_core
from jax._src.pallas import mpmd as pallas_mpmd
from jax._src.pallas import pallas_call as pallas_call_mod

SUPPORTED_JAX = (0, 12)
if tuple(int(p) for p in jax.__version__.split(".")[:2]) != SUPPORTED_JAX:  # pragma: no cover
    warnings.warn(
        f"pallaslab was built against jax {SUPPORTED_JAX[0]}.{SUPPORTED_JAX[1]}.x; "
        f"found jax {jax.__version__}. Capture may fail or miss kernels.",
        stacklevel=2,
    )

Jaxpr = jax_core.Jaxpr
PALLAS_CALL = pallas_call_mod.pallas_call_p
MPMD_MAP = pallas_mpmd.mpmd_map_p
KERNEL_PRIMITIVES = (PALLAS_CALL, MPMD_MAP)
# Primitives that call their sub-jaxpr exactly once with the same operands: values flow through.
_CALL_ONCE = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
              "custom_vmap_call", "remat", "checkpoint", "custom_lin"}
_CONTEXT_NAMES = {"pjit": "jit", "closed_call": "call", "custom_jvp_call": "custom_jvp",
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
    closed_jaxpr: Any
    flat_args: tuple[Any, ...]

"""The one-program runner: what the stepper's `pallas_call` runner (`stepper`) and the mesh
kernels' runners (`mesh_runners`) both build."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class ProgramRunner:
    """A captured `pallas_call` split into one jitted function per program, as JAX's HLO
    interpreter (`interpret=True`) runs it: the discharged kernel body, called with the program
    ids, the scalar-prefetch values, each operand's block and the scratch values.

    `run(program_ids, scalars, blocks, scratch) -> (blocks, scratch)`; blocks are squeezed like
    the kernel sees them. The caller keeps the (padded) arrays and slices blocks itself.
    """

    run: Callable[..., tuple[list[Any], list[Any]]]
    grid: tuple[int, ...]
    block_shapes: tuple[tuple[int, ...], ...]  # per input/output (squeezed dims = 1)
    squeezed: tuple[tuple[bool, ...], ...]
    blocked: tuple[tuple[bool, ...], ...]  # dims whose start is block index * block size
    element_padding: tuple[tuple[tuple[int, int], ...], ...]
    num_inputs: int
    num_outputs: int
    scratch_init: tuple[np.ndarray, ...]
    discharged: Any  # ClosedJaxpr of the discharged kernel body
    vmapped_dims: tuple[int, ...]
    aliases: tuple[tuple[int, int], ...]  # (input position among inputs, output position)
    # Mesh kernels: the body of one program (core), whose mesh coordinates are constants.
    discharged_at: Callable[[Sequence[int]], Any] | None = None
    mesh_axes: tuple[str, ...] | None = None  # mesh kernels: the mesh's axis names


def scratch_init(avals: Sequence[Any]) -> tuple[np.ndarray, ...]:
    """Scratch as the HLO interpreter starts it: NaN / int min, semaphores at zero."""
    from jax._src.pallas import primitives as pallas_primitives

    return tuple(np.asarray(pallas_primitives.uninitialized_value(a.shape, a.dtype))
                 for a in avals)

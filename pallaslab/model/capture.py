"""`capture(fn, *args)`: every Pallas kernel a call launches, found by tracing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from pallaslab.errors import KernelSelectionError, NoKernelError
from pallaslab.model import _jax
from pallaslab.model.kernel import Capture, Kernel


def capture(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Capture:
    """Trace `fn(*args, **kwargs)` (nothing runs) and describe every Pallas kernel it launches.

    Arguments may be arrays or `jax.ShapeDtypeStruct`s. With concrete arrays, dynamic grid
    dimensions and scalar-prefetch values are evaluated, so index maps that read them can be
    analysed; with abstract ones those stay unknown.
    """
    handle = _jax.trace(fn, args, kwargs)
    found = _jax.find_kernels(handle.closed_jaxpr)
    name = getattr(fn, "__name__", type(fn).__name__)
    if not found:
        raise NoKernelError(
            f"{name}(...) launched no Pallas kernel: tracing it found no `pallas_call`, "
            "`pl.kernel` or `plgpu.kernel`. Call the function that launches the kernel "
            "(the cell's last expression must be that call)."
        )
    concrete = _all_concrete(handle.flat_args)
    wanted = {id(f.eqn) for f in found if _jax.needs_concrete_values(f.eqn)}
    values = (
        _jax.concrete_kernel_operands(handle.closed_jaxpr, handle.flat_args, wanted)
        if concrete and wanted else {}
    )
    kernels = tuple(
        _jax.kernel_from_eqn(f, i, values.get(id(f.eqn))) for i, f in enumerate(found)
    )
    return Capture(kernels=kernels, function_name=name, concrete=concrete, handle=handle)


def _all_concrete(leaves: tuple[Any, ...]) -> bool:
    return not any(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)


def select_kernel(cap: Capture, which: int | str = 0) -> Kernel:
    """A kernel of a capture by launch index or by name."""
    if isinstance(which, int):
        if -len(cap) <= which < len(cap):
            return cap[which]
        raise KernelSelectionError(
            f"kernel index {which} is out of range: {cap.function_name}(...) launched "
            f"{len(cap)} kernel(s): {_listing(cap)}"
        )
    matches = [k for k in cap if k.name == which]
    if not matches:
        raise KernelSelectionError(
            f"no kernel named {which!r}: {cap.function_name}(...) launched {_listing(cap)}"
        )
    return matches[0]


def _listing(cap: Capture) -> str:
    return ", ".join(f"[{k.index}] {k.name}" for k in cap)

"""`capture(fn, *args)`: every Pallas kernel a call launches, found by tracing."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from pallaslab.errors import (
    KernelSelectionError,
    NoKernelError,
    PallasLabError,
    untested_jax_errors,
)
from pallaslab.model import _jax
from pallaslab.model._jax.foreign import foreign_calls
from pallaslab.model.kernel import Capture, Kernel


@untested_jax_errors  # on an untested JAX, pallaslab's own failure says which JAX
def capture(fn: Callable[..., Any], *args: Any, chip: str | None = None,
            **kwargs: Any) -> Capture:
    """Trace `fn(*args, **kwargs)` (nothing runs) and describe every Pallas kernel it launches.

    Arguments may be arrays or `jax.ShapeDtypeStruct`s. With concrete arrays, dynamic grid
    dimensions and scalar-prefetch values are evaluated, so index maps that read them can be
    analysed; with abstract ones those stay unknown. Arguments holding no array (flags such as
    `interpret=True`, block sizes) are passed through as Python values, as the call sees them.

    On a host without a TPU, a kernel whose tracing asks the TPU (emit_pipeline, run_scoped
    DMAs, default core counts, SparseCore meshes) is traced under the abstract TPU of `chip`
    ("v5e" when None; a chip with SparseCores when the kernel needs them), which each kernel
    records in `traced_for_chip`.

    Args:
        fn: the function to trace; it may launch any number of kernels.
        *args: its positional arguments (arrays, `jax.ShapeDtypeStruct`s or Python values).
        chip: the TPU chip ("v5e", "v6e", ...) to trace under when tracing asks the TPU.
        **kwargs: its keyword arguments.

    Returns:
        A frozen `Capture`: its `kernels` in launch order, and a handle to trace it again.

    Raises:
        NoKernelError: the call launched no `pallas_call`, `pl.kernel` or `plgpu.kernel`.
        GridError: a grid dimension is negative.
        UntestedJaxError: pallaslab itself failed on a JAX it is not tested with.
        Exception: the user's own exception while tracing, unwrapped, their line last.
    """
    traced, dyn_args, dyn_kwargs = _hold_static(fn, args, kwargs)
    handle = _jax.trace(traced, dyn_args, dyn_kwargs, chip=chip)
    return _capture_from(handle, getattr(fn, "__name__", type(fn).__name__))


def recapture(cap: Capture, chip: str) -> Capture:
    """The same call traced again under `chip`'s abstract TPU ("v5e", "tpu-v6e", ...), so a
    kernel whose tracing asks the chip (core counts, tiling, VMEM) is traced for that chip:
    what lowering for one TPU target needs. Raises `RecaptureError` for a capture that does
    not hold its traced function."""
    handle = cap.handle
    if handle is None or getattr(handle, "fn", None) is None:
        raise RecaptureError(
            f"capture of {cap.function_name}(...) holds no traced function, so it cannot be "
            f"traced again for chip {chip!r}: capture it with pallaslab.capture(fn, *args).")
    new = _jax.trace(handle.fn, handle.args, handle.kwargs, chip=chip, force_chip=True)
    return _capture_from(new, cap.function_name)


class RecaptureError(PallasLabError, ValueError):
    """A capture cannot be traced again (it does not hold its function)."""


def _capture_from(handle: Any, name: str) -> Capture:
    found = _jax.find_kernels(handle.closed_jaxpr)
    if not found and (foreign := foreign_calls(handle.closed_jaxpr)):
        kind, call = foreign[0]
        raise NoKernelError(
            f"{name}(...) launched no Pallas kernel: found {kind} custom call `{call}`, not a "
            "Pallas kernel: pallaslab reads `pallas_call`, `pl.kernel` and `plgpu.kernel` "
            "kernels.")
    if not found:
        raise NoKernelError(
            f"{name}(...) launched no Pallas kernel: tracing it found no `pallas_call`, "
            "`pl.kernel` or `plgpu.kernel`. Call the function that launches the kernel "
            "(the cell's last expression must be that call)."
        )
    structure = (_jax.find_kernels(handle.structure_jaxpr)
                 if handle.structure_jaxpr is not None else None)
    if structure is not None and len(structure) != len(found):
        structure = None  # the two traces disagree: keep the plain one's view
    concrete = _all_concrete(handle.flat_args)
    wanted = {id(f.eqn) for f in found if _jax.needs_concrete_values(f.eqn)}
    evaluated = (
        _jax.concrete_kernel_operands(handle.closed_jaxpr, handle.flat_args, wanted)
        if concrete and wanted else None
    )
    values = evaluated.values if evaluated is not None else {}
    reasons = evaluated.reasons if evaluated is not None else {}
    kernels = tuple(
        _with_reason(_jax.kernel_from_eqn(f, i, values.get(id(f.eqn)),
                                          structure[i] if structure is not None else None,
                                          handle.traced_for_chip), reasons.get(id(f.eqn)))
        for i, f in enumerate(found)
    )
    kernels = _jax.fuser_sources(handle.fn, handle.args, handle.kwargs, kernels,
                                 handle.traced_for_chip)
    for kernel in kernels:
        check_grid(kernel)
    return Capture(kernels=kernels, function_name=name, concrete=concrete, handle=handle)


def _with_reason(kernel: Kernel, reason: str | None) -> Kernel:
    return dataclasses.replace(kernel, dynamic_values_reason=reason) if reason else kernel


class GridError(PallasLabError, ValueError):
    """A kernel's grid has a negative dimension."""


def check_grid(kernel: Kernel) -> None:
    """Reject negative grid dimensions (static, or dynamic ones evaluated from the arguments).

    Pallas traces them, and its interpreters then run no program at all, leaving the outputs
    unwritten with no word said: almost surely a bug in how the grid was computed. A zero
    dimension is a legitimate empty grid and passes.
    """
    negative = [(d, g) for d, g in enumerate(kernel.grid) if g is not None and g < 0]
    if not negative:
        return
    grid = "(" + ", ".join("?" if g is None else str(g) for g in kernel.grid) + \
        ("," if len(kernel.grid) == 1 else "") + ")"
    dims = ", ".join(f"dimension {d} is {g}" for d, g in negative)
    where = f" ({kernel.call_site or kernel.source})" if kernel.call_site or kernel.source else ""
    raise GridError(
        f"kernel {kernel.name!r}{where}: grid {grid} has a negative size ({dims}). A grid "
        "dimension counts programs and must be >= 0; Pallas would run no program and leave "
        "the outputs unwritten. Check how the grid is computed."
    )


def holds_array(value: Any) -> bool:
    """Does `value` hold an array that `capture` traces? NumPy scalars (`np.int64(8)` from
    `np.gcd` or shape arithmetic) do not: like Python numbers they stay static, so a block size
    is the number the plain call sees; as a traced operand one computes the same value (a
    constant of its dtype in the trace)."""
    return any(isinstance(leaf, (jax.Array, np.ndarray, jax.ShapeDtypeStruct))
               for leaf in jax.tree_util.tree_leaves(value))


class TracedLeaves:
    """`fn`, returning only the leaves of its result that tracing computed (a flat list: the
    outputs of the jaxpr `capture(TracedLeaves(fn), ...)` traces); picklable when `fn` is, so
    a worker process can trace the same call again."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        leaves = jax.tree_util.tree_leaves(self.fn(*args, **kwargs))
        return [v for v in leaves if isinstance(v, jax.core.Tracer)]


def _hold_static(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """`fn` with its array-free arguments bound, and the arguments left to trace."""
    held = {i: a for i, a in enumerate(args) if not holds_array(a)}
    held_kw = {k: v for k, v in kwargs.items() if not holds_array(v)}
    if not held and not held_kw:
        return fn, args, kwargs

    @functools.wraps(fn)
    def bound(*dyn: Any, **dyn_kw: Any) -> Any:
        it = iter(dyn)
        full = [held[i] if i in held else next(it) for i in range(len(args))]
        return fn(*full, **held_kw, **dyn_kw)

    dyn_args = tuple(a for i, a in enumerate(args) if i not in held)
    return bound, dyn_args, {k: v for k, v in kwargs.items() if k not in held_kw}


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

"""Capturing a function (or lone kernel) on concrete arguments: the `Prepared` every executor
runs (the type lives with the protocol)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pallaslab import settings
from pallaslab.errors import MemoryBudgetError
from pallaslab.execute.data import (
    DEFAULT_SEED,
    any_abstract,
    array_leaves,
    concretize,
    concretize_for_kernels,
)
from pallaslab.execute.protocol import ExecutorError, Prepared
from pallaslab.execute.result import OutputInfo
from pallaslab.model import Capture, Kernel, _jax, capture
from pallaslab.settings import size_text

__all__ = ["Prepared", "check_devices", "check_memory", "output_info", "prepare"]


def prepare(kernel_or_fn: Kernel | Callable[..., Any], args: Sequence[Any],
            kwargs: Mapping[str, Any] | None = None, *, seed: int = DEFAULT_SEED,
            chip: str | None = None, devices: int | None = None,
            captured: Capture | None = None) -> Prepared:
    """Capture on concrete arguments (abstract ones get seeded random data); `chip`: the
    abstract TPU to trace under when tracing asks the TPU (see `capture`); `devices`: run on
    that many simulated CPU devices (see `check_devices`); `captured`: this very call's
    capture, already made on these concrete arguments (flat outputs included), used instead
    of tracing `fn` again here, so the caller's Python runs once (`%%pallas --compare`)."""
    check_devices(devices)
    kwargs = dict(kwargs or {})
    if captured is not None:
        return _prepared_from(kernel_or_fn, tuple(args), kwargs, captured, devices)
    if isinstance(kernel_or_fn, Kernel):
        fn = _lone_kernel_fn(kernel_or_fn)
        args = tuple(args) or tuple(_jax.kernel_call_avals(kernel_or_fn))
        check_memory(args, {})  # before the inputs are made
        args = tuple(concretize(args, seed=seed))
    else:
        fn = kernel_or_fn
        check_memory(tuple(args), kwargs)
        args, kwargs = concretize_for_kernels(fn, tuple(args), kwargs, seed=seed)
    with _jax.debug_checks_enabled():  # kernels keep their pl.debug_checks for executors
        cap = capture(fn, *args, **kwargs) if chip is None else \
            capture(fn, *args, chip=chip, **kwargs)
    check_memory(args, kwargs, cap.handle.closed_jaxpr.out_avals)  # before anything runs
    return Prepared(fn, tuple(args), kwargs, cap, output_info(cap), devices)


def _prepared_from(fn: Kernel | Callable[..., Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any], captured: Capture, devices: int | None) -> Prepared:
    if isinstance(fn, Kernel) or any_abstract((args, kwargs)):
        raise ExecutorError(f"prepare(captured=...) of {getattr(fn, '__name__', fn)!r}: a "
                            "capture made already is reused for a function called on concrete "
                            "arrays only (abstract arguments get random data, which it was "
                            "not captured on)")
    check_memory(args, kwargs, captured.handle.closed_jaxpr.out_avals)  # as after a capture
    return Prepared(fn, args, kwargs, captured, output_info(captured), devices)


def check_devices(devices: int | None) -> None:
    """`devices=N`: the function runs in a worker process whose JAX has N CPU devices (set
    before its backend starts: a notebook that already imported JAX keeps its own count), so
    `shard_map` kernels run on N simulated devices under TPU interpret mode. The function is
    captured here too, on this process's devices: build its mesh from `jax.devices()`. N is
    at most `settings.max_devices()` (XLA starts threads per device: far more abort)."""
    if devices is None:
        return
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ExecutorError(f"devices must be a positive number of simulated CPU devices, "
                            f"got {devices!r}")
    problem = settings.devices_over_limit(devices)
    if problem:
        raise ExecutorError(f"devices={devices}: {problem}")


def check_memory(args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 outputs: Sequence[Any] = ()) -> None:
    """Refuse a run that would hold more than the memory budget (`settings.memory_budget`).

    The estimate, from shapes and dtypes alone (nothing is read or allocated): the inputs,
    the outputs (known once the call is captured: `prepare` checks before it makes the
    inputs, and again before anything runs) and one copy of each that the executor makes (a
    worker process receives the inputs and sends the outputs back pickled; the interpreters
    keep buffers of their own). Raises MemoryBudgetError naming the largest array, its bytes
    and the budget."""
    budget = settings.memory_budget()
    inputs = [dataclasses.replace(leaf, name=_input_name(leaf.name))
              for leaf in array_leaves((tuple(args), dict(kwargs)), "")]
    outs = array_leaves(list(outputs), "outputs")
    held_in = sum(leaf.nbytes for leaf in inputs)
    held_out = sum(leaf.nbytes for leaf in outs)
    copies = held_in + held_out
    total = held_in + held_out + copies
    if total <= budget.nbytes:
        return
    largest = max([*inputs, *outs], key=lambda leaf: leaf.nbytes)
    raise MemoryBudgetError(
        f"{largest}: the run would hold {size_text(total)} (inputs {size_text(held_in)}, "
        f"outputs {size_text(held_out)}, the executor's copies {size_text(copies)}), over the "
        f"budget of {size_text(budget.nbytes)} ({budget.origin}); refused before the run. "
        f"Use smaller arrays, or set {settings.MEMORY_BUDGET} to a number of bytes or a "
        "fraction of the memory available")


def _input_name(path: str) -> str:
    """`[0][1]` (args, then its second) -> args[1]; `[1]['x']` -> kwargs['x']."""
    return ("args" if path.startswith("[0]") else "kwargs") + path[3:]


def _lone_kernel_fn(kernel: Kernel) -> Callable[..., Any]:
    call = _jax.kernel_callable(kernel)

    def lone_kernel(*operands: Any) -> list[Any]:
        return call(*operands)

    lone_kernel.__name__ = kernel.name
    return lone_kernel


def output_info(cap: Capture) -> tuple[OutputInfo, ...]:
    """Where each flat output of the captured function comes from (a kernel output's
    origin, or its position)."""
    sources = _jax.output_sources(cap.handle.closed_jaxpr, cap.kernels)
    infos = []
    for i, src in enumerate(sources):
        if src is None:
            infos.append(OutputInfo(f"result[{i}]", None, None))
            continue
        k, j = src
        origin = cap[k].outputs[j].origin
        name = origin if len(cap) == 1 else f"{cap[k].name}[{k}].{origin}"
        if any(info.name == name for info in infos):
            name = f"{name}#{i}"
        infos.append(OutputInfo(name, k, origin))
    return tuple(infos)

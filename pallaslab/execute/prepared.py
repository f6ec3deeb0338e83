"""Capturing a function (or lone kernel) on concrete arguments: the `Prepared` every executor
runs (the type lives with the protocol)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pallaslab.execute.data import DEFAULT_SEED, concretize, concretize_for_kernels
from pallaslab.execute.protocol import ExecutorError, Prepared
from pallaslab.execute.result import OutputInfo
from pallaslab.model import Capture, Kernel, _jax, capture

__all__ = ["Prepared", "check_devices", "output_info", "prepare"]


def prepare(kernel_or_fn: Kernel | Callable[..., Any], args: Sequence[Any],
            kwargs: Mapping[str, Any] | None = None, *, seed: int = DEFAULT_SEED,
            chip: str | None = None, devices: int | None = None) -> Prepared:
    """Capture on concrete arguments (abstract ones get seeded random data); `chip`: the
    abstract TPU to trace under when tracing asks the TPU (see `capture`); `devices`: run on
    that many simulated CPU devices (see `check_devices`)."""
    check_devices(devices)
    kwargs = dict(kwargs or {})
    if isinstance(kernel_or_fn, Kernel):
        fn = _lone_kernel_fn(kernel_or_fn)
        args = tuple(concretize(tuple(args), seed=seed)) if args else tuple(
            concretize(tuple(_jax.kernel_call_avals(kernel_or_fn)), seed=seed))
    else:
        fn = kernel_or_fn
        args, kwargs = concretize_for_kernels(fn, tuple(args), kwargs, seed=seed)
    with _jax.debug_checks_enabled():  # kernels keep their pl.debug_checks for executors
        cap = capture(fn, *args, **kwargs) if chip is None else \
            capture(fn, *args, chip=chip, **kwargs)
    return Prepared(fn, tuple(args), kwargs, cap, output_info(cap), devices)


def check_devices(devices: int | None) -> None:
    """`devices=N`: the function runs in a worker process whose JAX has N CPU devices (set
    before its backend starts: a notebook that already imported JAX keeps its own count), so
    `shard_map` kernels run on N simulated devices under TPU interpret mode. The function is
    captured here too, on this process's devices: build its mesh from `jax.devices()`."""
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int)
                                or devices < 1):
        raise ExecutorError(f"devices must be a positive number of simulated CPU devices, "
                            f"got {devices!r}")


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

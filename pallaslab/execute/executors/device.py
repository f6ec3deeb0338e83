"""The `device` executor: the kernels compiled for, and run on, an attached TPU or GPU."""

from __future__ import annotations

import time
from typing import Any

import jax

from pallaslab.errors import UnavailableError
from pallaslab.execute.data import array_leaves
from pallaslab.execute.protocol import ExecutorSpec, Prepared, numpy_values
from pallaslab.execute.result import RunResult
from pallaslab.model import _jax
from pallaslab.settings import size_text

# XLA's words for an allocation the device could not make (at compile or at run time).
_OUT_OF_MEMORY = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory")


def attached_accelerator() -> tuple[Any | None, str | None]:
    """(device, None) for an attached TPU or GPU, else (None, why not)."""
    for platform in ("tpu", "gpu"):
        try:
            devices = jax.devices(platform)
        except RuntimeError:
            continue
        if devices:
            return devices[0], None
    try:
        backends = sorted({d.platform for d in jax.devices()})
    except RuntimeError:  # pragma: no cover
        backends = []
    return None, ("no TPU or GPU is attached: the JAX backends here are "
                  f"{', '.join(backends) or 'none'}; run on a TPU/GPU VM for hardware outputs")


def require_device() -> Any:
    device, reason = attached_accelerator()
    if device is None:
        raise UnavailableError(f"the device executor is unavailable: {reason}")
    return device


class DeviceExecutor:
    """The kernels compiled and run on an attached TPU or GPU."""

    spec = ExecutorSpec(
        name="device", label="the attached TPU/GPU",
        description="compiled for and run on an attached TPU or GPU (unavailable elsewhere)",
        isolated=False)  # an accelerator belongs to one process: the notebook's
    name = spec.name

    def __init__(self, device: Any = None):
        self._device = device

    def device(self) -> Any:
        if self._device is not None:
            return self._device
        return attached_accelerator()[0]

    def unavailable(self) -> str | None:
        if self._device is not None:
            return None
        return attached_accelerator()[1]

    def cannot_run(self, prepared: Prepared) -> str | None:
        return self.spec.refusal(prepared.capture)

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        device = self.device()
        kind = getattr(device, "device_kind", str(device))
        free = free_device_memory(device)
        if free is not None and (why := memory_refusal(prepared, free, kind)):
            return RunResult(self.name, None, prepared.output_info, 0.0, 0.0, unavailable=why,
                             inputs=numpy_values(prepared.flat_args))
        cap = prepared.capture
        jaxpr = _jax.rewrite_kernels(
            cap.handle.closed_jaxpr,
            lambda eqn: {"interpret": False} if _jax.is_pallas_call(eqn) else None)
        t0 = time.perf_counter()
        compile_time = 0.0
        try:
            flat = jax.device_put(prepared.flat_args, device)
            compiled = jax.jit(_jax.jaxpr_callable(jaxpr)).lower(*flat).compile()
            compile_time = time.perf_counter() - t0
            t1 = time.perf_counter()
            outs = jax.block_until_ready(compiled(*flat))
        except Exception as err:
            if not any(word in str(err) for word in _OUT_OF_MEMORY):
                raise
            return RunResult(self.name, None, prepared.output_info, 0.0, compile_time,
                             error=out_of_memory_text(prepared, kind, free, err),
                             inputs=numpy_values(prepared.flat_args))
        return RunResult(self.name, numpy_values(outs), prepared.output_info,
                         time.perf_counter() - t1, compile_time,
                         inputs=numpy_values(prepared.flat_args))


# --- device memory ---------------------------------------------------------------------------


def free_device_memory(device: Any) -> int | None:
    """Bytes the device's allocator can still give (its limit less what is in use), or None
    where the device does not say (the CPU's `memory_stats()` is None)."""
    try:
        stats = device.memory_stats()
    except Exception:  # a backend without allocator statistics
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))


def device_memory_need(prepared: Prepared) -> tuple[int, int, str]:
    """(input bytes, output bytes, the largest array's description) a device run holds at
    once: the inputs put on the device and the outputs the compiled call returns."""
    inputs = array_leaves(tuple(prepared.args), "args") + \
        array_leaves(dict(prepared.kwargs), "kwargs")
    outputs = array_leaves(list(prepared.capture.handle.closed_jaxpr.out_avals), "outputs")
    largest = max([*inputs, *outputs], key=lambda leaf: leaf.nbytes, default=None)
    return (sum(leaf.nbytes for leaf in inputs), sum(leaf.nbytes for leaf in outputs),
            str(largest) if largest is not None else "no arrays")


def memory_refusal(prepared: Prepared, free: int, device_kind: str) -> str | None:
    """Why the run cannot fit in the `free` bytes of the device's memory (None: it fits).
    The estimate counts the inputs and outputs only: the kernels' own scratch lives in
    on-chip memory, and XLA's temporaries are found out by the compile."""
    held_in, held_out, largest = device_memory_need(prepared)
    need = held_in + held_out
    if need <= free:
        return None
    return (f"{largest}: the device run needs {size_text(need)} of device memory (inputs "
            f"{size_text(held_in)}, outputs {size_text(held_out)}), more than the "
            f"{size_text(max(free, 0))} free on the {device_kind}; refused before the run. "
            "Use smaller arrays, or free device memory (other arrays, other processes)")


def out_of_memory_text(prepared: Prepared, device_kind: str, free: int | None,
                       err: BaseException) -> str:
    """The device's own out-of-memory error, with what the run needed and what was free."""
    held_in, held_out, largest = device_memory_need(prepared)
    had = f"{size_text(free)} free" if free is not None else "its free memory unknown"
    line = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
    return (f"the {device_kind} ran out of memory: the run's inputs and outputs take "
            f"{size_text(held_in + held_out)} ({had}; largest: {largest}), and XLA said: "
            f"{line[:300]}")

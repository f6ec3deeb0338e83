"""The `device` executor: the kernels compiled for, and run on, an attached TPU or GPU."""

from __future__ import annotations

import time
from typing import Any

import jax

from pallaslab.errors import UnavailableError
from pallaslab.execute.prepared import Prepared
from pallaslab.execute.protocol import ExecutorSpec, numpy_values
from pallaslab.execute.result import RunResult
from pallaslab.model import _jax


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
        cap = prepared.capture
        jaxpr = _jax.rewrite_kernels(
            cap.handle.closed_jaxpr,
            lambda eqn: {"interpret": False} if _jax.is_pallas_call(eqn) else None)
        flat = jax.device_put(prepared.flat_args, device)
        t0 = time.perf_counter()
        compiled = jax.jit(_jax.jaxpr_callable(jaxpr)).lower(*flat).compile()
        compile_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        outs = jax.block_until_ready(compiled(*flat))
        return RunResult(self.name, numpy_values(outs), prepared.output_info,
                         time.perf_counter() - t1, compile_time,
                         inputs=numpy_values(prepared.flat_args))

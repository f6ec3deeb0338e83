"""The kernel contexts of a workbench opened with `devices=N`: every tab describes the run its
Step and Devices tabs make, the per-device kernel as traced on N simulated devices.

A kernel inside `shard_map` traced in this process (one CPU device) has the grid and the shard
shapes of a one-device mesh; on N devices it may have others (a ring all-gather: one program
over the whole (32, 128) array here, three programs over an (8, 128) shard each there). So the
call is traced again in the N-device worker (`pallaslab.execute.device_trace`) and each kernel
shown as traced there. When that cannot be done, the tabs keep this process's trace and the
Overview says so, and why (`KernelContext.devices_trace_error`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pallaslab.model import Capture, Kernel
from pallaslab.views.context import KernelContext
from pallaslab.views.session import Session


def kernel_contexts(cap: Capture, chosen: Sequence[Kernel], chips: tuple[str, ...],
                    targets: tuple[str, ...], options: Mapping[str, Any], session: Session
                    ) -> tuple[KernelContext, ...]:
    """One context per chosen kernel, each with the workbench's `session`; with
    `options["devices"]` = N, kernels inside shard_map traced here on another number of
    devices are those of the trace on N devices (traced with the session's call)."""
    local = tuple(KernelContext(k, cap, chips, targets, options, session=session)
                  for k in chosen)
    n = devices_asked(options)
    if n is None or not any(traced_on_other_devices(k, n) for k in chosen):
        return local
    trace = _trace(cap, session, chosen, n, local[0].backend)
    if trace.error is not None:
        why = f"tracing it on {n} devices failed: {trace.error}"
        return tuple(dataclasses.replace(c, devices_trace_error=why)
                     if traced_on_other_devices(c.kernel, n) else c for c in local)
    there = {i.kernel.index: i for i in trace.inspections}
    contexts = []
    for c in local:
        insp = there.get(c.kernel.index)
        if insp is None or insp.kernel.name != c.kernel.name:
            launched = ", ".join(f"{i.kernel.index}: {i.kernel.name}" for i in trace.inspections)
            contexts.append(dataclasses.replace(c, devices_trace_error=(
                f"on {n} devices the call launches other kernels ({launched or 'none'})")))
        else:
            contexts.append(dataclasses.replace(c, kernel=insp.kernel, traced_on_devices=insp))
    return tuple(contexts)


def devices_asked(options: Mapping[str, Any]) -> int | None:
    """The simulated devices a workbench was opened with (`devices=N`, `--devices N`)."""
    n = options.get("devices")
    if n is None or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return None
    return n


def traced_on_other_devices(kernel: Kernel, devices: int) -> bool:
    """A kernel inside shard_map whose mesh, as traced here, is not `devices` devices."""
    mesh = kernel.device_mesh
    return mesh is not None and math.prod(size for _, size in mesh.axes) != devices


def _trace(cap: Capture, session: Session, chosen: Sequence[Kernel], devices: int,
           backend: str | None) -> Any:
    from pallaslab.execute.device_trace import DeviceTrace, trace_on_devices

    call = session.traceable_call()
    if call is None:
        return DeviceTrace(devices, error="the capture keeps no call to trace again")
    fn, args, kwargs = call
    chip = next((k.traced_for_chip for k in chosen if k.traced_for_chip), None)
    return trace_on_devices(fn, args, kwargs, devices=devices, backend=backend, chip=chip,
                            sources=cap.kernels)

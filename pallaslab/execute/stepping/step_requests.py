"""The worker's side of requests for stepped runs and the N-device worker: "open-device-stepper"
(with `work`) and "device-step" requests go to the multi-device stepper, or to the core
stepper when they say "stepper": "cores" (a TPU mesh kernel whose cores signal each other,
stepped core by core); "stepper": "trace" (with `work`) describes the function's kernels as
traced on the worker's devices (`pallaslab.execute.device_trace`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pallaslab.execute.stepping import core_stepper, device_stepper


def handle_request(request: Mapping[str, Any], work: Mapping[str, Any] | None) -> Any:
    if request.get("stepper") == "trace" and work is not None:
        from pallaslab.execute.device_trace import describe

        return describe(work)
    if request.get("stepper") == "cores":
        return core_stepper.handle_request(request, work)
    return device_stepper.handle_request(request, work)

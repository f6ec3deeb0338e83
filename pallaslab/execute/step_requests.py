"""The worker's side of stepped runs: "open-device-stepper" (with `work`) and "device-step"
requests go to the multi-device stepper, or to the core stepper when they say
"stepper": "cores" (a TPU mesh kernel whose cores signal each other, stepped core by core)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pallaslab.execute import core_stepper, device_stepper


def handle_request(request: Mapping[str, Any], work: Mapping[str, Any] | None) -> Any:
    if request.get("stepper") == "cores":
        return core_stepper.handle_request(request, work)
    return device_stepper.handle_request(request, work)

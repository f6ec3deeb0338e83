"""The interpreters' parameters, built the same way on every supported JAX.

JAX 0.12 added `on_race` to TPU and GPU interpret mode's parameters ("raise" or "warn": a race
logged as a warning, and the run goes on). JAX 0.11 has no such field: its race detectors
`print` each race and always carry on, which is 0.12's "warn" but on stdout, where the
executors' race logs (`pallaslab.execute.executors.diagnostics`) never see it. On 0.11 the field is
dropped and the detectors' reports are sent to their module's logger instead, as 0.12 does.
"""

from __future__ import annotations

import builtins
import logging
from typing import Any

from pallaslab.model._jax.versions import JAX_VERSION

# Whether InterpretParams / InterpretGPUParams take `on_race` (JAX >= 0.12).
HAS_ON_RACE = JAX_VERSION >= (0, 12)


def tpu_interpret_params(**params: Any) -> Any:
    """`pltpu.InterpretParams(**params)`; `on_race="warn"` means the same on every JAX."""
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.InterpretParams(**_on_race(params))


def gpu_interpret_params(**params: Any) -> Any:
    """`plgpu.InterpretGPUParams(**params)`; `on_race="warn"` means the same on every JAX."""
    from jax.experimental.pallas import mosaic_gpu as plgpu

    return plgpu.InterpretGPUParams(**_on_race(params))


def _on_race(params: dict[str, Any]) -> dict[str, Any]:
    if HAS_ON_RACE or "on_race" not in params:
        return params
    params = dict(params)
    if params.pop("on_race") != "warn":
        raise ValueError(f"jax {'.'.join(map(str, JAX_VERSION))} only reports races and "
                         "carries on (on_race='warn')")
    races_to_logging()
    return params


def races_to_logging() -> None:
    """JAX < 0.12: the race detectors' `print("RACE DETECTED ...")` becomes a warning of the
    detector module's logger (the logger JAX 0.12 uses); any other print is left as it was."""
    if HAS_ON_RACE:
        return
    from jax._src.pallas.mosaic.interpret import race_detection_state as tpu_races
    from jax._src.pallas.mosaic_gpu.interpret import race_detection_state as gpu_races

    for module in (tpu_races, gpu_races):
        if not isinstance(getattr(module, "print", None), _RaceToLog):
            module.print = _RaceToLog(module.__name__)  # type: ignore[attr-defined]


class _RaceToLog:
    def __init__(self, logger: str):
        self.logger = logging.getLogger(logger)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) == 1 and not kwargs and str(args[0]).startswith("RACE DETECTED"):
            self.logger.warning("%s", args[0])
        else:
            builtins.print(*args, **kwargs)

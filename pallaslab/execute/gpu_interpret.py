"""The `gpu-interpret` executor: Mosaic GPU interpret mode, for `plgpu.kernel` kernels."""

from __future__ import annotations

import time

import jax
import numpy as np

from pallaslab.analysis.findings import Finding
from pallaslab.execute import capabilities, diagnostics
from pallaslab.execute.executors import Prepared, _numpy
from pallaslab.execute.monitor import RunMonitor
from pallaslab.execute.result import RunResult


class GpuInterpretExecutor:
    """Mosaic GPU interpret mode, for `plgpu.kernel` kernels."""

    name = "gpu-interpret"

    def unavailable(self) -> str | None:
        try:
            from jax.experimental.pallas import mosaic_gpu  # noqa: F401
        except ImportError as err:  # pragma: no cover - absl-py missing
            return f"Mosaic GPU interpret mode cannot be imported ({err}); " \
                   'install it with: pip install "pallaslab[gpu]"'
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        for k in prepared.capture:
            if k.kind != "mesh" or k.backend != "mosaic_gpu":
                return (f"kernel {k.name} is a {k.kind} kernel for {k.backend or 'no backend'}: "
                        "GPU interpret mode runs plgpu.kernel (Mosaic GPU mesh) kernels only")
        return None

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        from jax.experimental.pallas import mosaic_gpu as plgpu

        # Rebinding the captured equation misses the interpreter's ordered effects: re-trace
        # the user's function with GPU interpret mode forced instead.
        monitor = RunMonitor(list(prepared.capture), desc=self.name, deadline=deadline)
        t0 = time.perf_counter()
        with plgpu.force_gpu_interpret_mode(plgpu.InterpretGPUParams()):
            compiled = jax.jit(prepared.fn).lower(*prepared.args, **prepared.kwargs).compile()
        compile_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        outputs: tuple[np.ndarray, ...] | None = None
        error, unavailable, findings = None, None, []
        with monitor.watching():
            try:
                outs = compiled(*prepared.args, **prepared.kwargs)
                jax.block_until_ready(outs)
                jax.effects_barrier()
                outputs = _numpy(jax.tree.leaves(outs))
            except Exception as err:
                # JAX's interpreter lacking a feature is no verdict on the kernel.
                unavailable = capabilities.unimplemented(
                    self.name, f"{type(err).__name__}: {err}", list(prepared.capture))
                if unavailable is None:
                    error = diagnostics.short_error(str(err))
                    findings.append(Finding("interpret-error", "error", error))
        return RunResult(self.name, outputs, prepared.output_info, time.perf_counter() - t1,
                         compile_time, prints=monitor.prints, findings=tuple(findings),
                         error=error, unavailable=unavailable,
                         inputs=_numpy(prepared.flat_args))

"""The built-in executors, registered in the order the CLI lists them.

This is the module that imports the implementations (each imports only the protocol and the
registry); `pallaslab.execute` imports it before anything else, so the built-in names are
always there.
"""

from __future__ import annotations

from pallaslab.execute.executors.device import DeviceExecutor
from pallaslab.execute.executors.gpu_interpret import GpuInterpretExecutor
from pallaslab.execute.executors.interpret import InterpretExecutor
from pallaslab.execute.executors.reference import ReferenceExecutor
from pallaslab.execute.executors.tpu_interpret import TpuInterpretExecutor
from pallaslab.execute.executors.vectorized import VectorizedExecutor
from pallaslab.execute.registry import register_executor

BUILTIN_EXECUTORS = (InterpretExecutor, TpuInterpretExecutor, GpuInterpretExecutor,
                     VectorizedExecutor, DeviceExecutor, ReferenceExecutor)

for _executor in BUILTIN_EXECUTORS:
    register_executor(_executor)

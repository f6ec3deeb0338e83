"""Executors (interpret, tpu-interpret, gpu-interpret, device, reference), compare, stepper."""

from pallaslab.execute.comparison import Comparison, OutputComparison, PairComparison, compare
from pallaslab.execute.executors import (
    EXECUTOR_NAMES,
    Executor,
    ExecutorError,
    get_executor,
    prepare,
    run,
)
from pallaslab.execute.result import OutputInfo, ProgramPrint, RunResult
from pallaslab.execute.stepper import ProgramBlocks, Stepper, step

__all__ = [
    "EXECUTOR_NAMES",
    "Comparison",
    "Executor",
    "ExecutorError",
    "OutputComparison",
    "OutputInfo",
    "PairComparison",
    "ProgramBlocks",
    "ProgramPrint",
    "RunResult",
    "Stepper",
    "compare",
    "get_executor",
    "prepare",
    "run",
    "step",
]

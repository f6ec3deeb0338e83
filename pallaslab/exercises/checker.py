"""`check(NAME, fn)`: the learner's function against the exercise's hidden reference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pallaslab.errors import NoKernelError
from pallaslab.exercises.diagnose import diagnosis, finding_line
from pallaslab.exercises.exercise import Exercise, ExerciseResult
from pallaslab.exercises.registry import exercise

CHECK_TIMEOUT_S = 120.0  # a learner's kernel that spins is stopped, not waited on


def check(name: str, fn: Callable[..., Any], *, hint: bool = False,
          timeout: float | None = CHECK_TIMEOUT_S) -> ExerciseResult:
    """Run `fn` on the exercise's inputs against its reference, with pallaslab's findings and
    causes: the verdict, the diagnosis in a learner's words, and the hints when `hint`."""
    from pallaslab.execute import compare

    ex = exercise(name)
    hints = ex.hints if hint else ()
    try:
        comparison = compare(fn, *ex.inputs(), executors=list(ex.executors),
                             reference=ex.reference, rtol=ex.rtol, atol=ex.atol,
                             timeout=timeout, devices=ex.devices)
    except Exception as err:  # the learner's code failed while tracing: that is the answer
        return ExerciseResult(ex.name, "error", (_error_line(err),), hints=hints)
    return _result(ex, comparison, hints)


def _result(ex: Exercise, comparison: Any, hints: tuple[str, ...]) -> ExerciseResult:
    failed = [r for r in comparison.results if r.executor != "reference" and r.error]
    if comparison.outcome == "pass":
        return ExerciseResult(ex.name, "correct", notes=tpu_notes(comparison), hints=hints)
    if comparison.outcome in ("mismatch", "errors"):
        lines = known_mistakes(ex, comparison)
        lines += tuple(line for line in diagnosis(comparison) if line not in lines)
        if failed and not lines:
            return ExerciseResult(ex.name, "error", tuple(f"{r.executor}: {r.error}"
                                                          for r in failed), hints=hints)
        return ExerciseResult(ex.name, "wrong", lines, hints=hints)
    if failed:
        return ExerciseResult(ex.name, "error", tuple(f"{r.executor}: {r.error}"
                                                      for r in failed), hints=hints)
    return ExerciseResult(ex.name, "not-checked", (comparison.verdict(),), hints=hints)


def known_mistakes(ex: Exercise, comparison: Any) -> tuple[str, ...]:
    """What each of the exercise's known mistakes says, for those whose output the learner's
    kernel reproduced (on the inputs the comparison ran, within its tolerances)."""
    import numpy as np

    from pallaslab.execute.comparing.pair import compare_arrays

    ran = [r for r in comparison.results
           if r.executor != "reference" and r.outputs is not None and r.inputs]
    if not ran or not ex.mistakes:
        return ()
    got = ran[0]
    said = []
    for mistake in ex.mistakes:
        try:
            expected = np.asarray(mistake.computes(*got.inputs))
        except Exception:  # a mistake that cannot be computed on these inputs matches nothing
            continue
        out = got.outputs[0]
        if expected.shape == out.shape and \
                compare_arrays(out, expected, rtol=ex.rtol, atol=ex.atol).allclose:
            said.append(mistake.says)
    return tuple(said)


def tpu_notes(comparison: Any) -> tuple[str, ...]:
    """What a TPU would reject in a kernel that computes the right values (block shapes Mosaic
    rejects, VMEM that does not fit): notes, not failures, since the course runs on a CPU."""
    from pallaslab.analysis.inspection import inspect_kernel

    notes: list[str] = []
    for kernel in comparison.kernels:
        try:
            found = inspect_kernel(kernel, backend="tpu").findings
        except Exception as err:  # an analysis that cannot judge this kernel says so
            notes.append(f"the TPU rules could not be checked on this kernel: {err}")
            continue
        for f in found:
            if f.severity in ("error", "warning") and f.code not in _NOT_TPU_ONLY:
                line = finding_line(f) if f.severity == "error" else None
                notes.append("it runs here, but on a TPU: " + (line or f"{f.code}: {f.message}"))
    return tuple(dict.fromkeys(notes))


# Findings about the kernel's logic, which the comparison has already judged.
_NOT_TPU_ONLY = frozenset({"data-race", "parallel-write-conflict", "unwritten-output",
                           "out-of-bounds-read", "block-out-of-bounds"})


def _error_line(err: BaseException) -> str:
    if isinstance(err, NoKernelError):  # the stub as given, or a function that forgot the call
        return ("your function launched no Pallas kernel: it must call `pl.pallas_call(...)` "
                "and return its result")
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"

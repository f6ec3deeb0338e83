"""The caller's side of a comparison, checked before anything runs: the executors (an
`ExecutorList`: names or one comma-separated string), the reference they are checked against,
and the tolerances."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pallaslab.execute.executors.reference import located
from pallaslab.execute.protocol import Executor, ExecutorError
from pallaslab.execute.registry import ExecutorList, get_executor, spec_for


def runners(executors: ExecutorList, reference: Callable[..., Any] | None) -> list[Executor]:
    checked = located(reference) if reference is not None else None
    built = [get_executor(e, reference=checked) for e in executors.items]
    if reference is None and any(spec_for(r).takes_reference for r in built):
        raise ExecutorError("the reference executor needs a reference function: pass "
                            "reference=my_ref (same signature as the kernel function)")
    return built


def named(executors: ExecutorList | str | Sequence[str | Executor],
          reference: Callable[..., Any] | None) -> tuple[ExecutorList, str | None]:
    """The executors a caller named, parsed and checked (`ExecutorList`), with the reference
    executor added when a reference is given, and the note saying so."""
    listed, added = ExecutorList.parse(executors).with_reference(reference)
    return listed.compared(), added


def check_tolerance(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or \
            not np.isfinite(value) or value < 0:
        raise ExecutorError(f"{name}={value!r}: a tolerance is a finite number >= 0")

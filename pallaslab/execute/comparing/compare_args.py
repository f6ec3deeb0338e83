"""The caller's side of a comparison, checked before anything runs: the executors (names or
one comma-separated string), the reference they are checked against, and the tolerances."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pallaslab.execute.executors.reference import located
from pallaslab.execute.protocol import Executor, ExecutorError
from pallaslab.execute.registry import executor_names, get_executor


def with_reference(executors: Sequence[str | Executor] | str,
                    reference: Callable[..., Any] | None
                    ) -> tuple[Sequence[str | Executor] | str, str | None]:
    """The executors, with "reference" added when `reference` is given but not listed (the
    caller gave a reference to check the kernel against), and the note saying so."""
    listed = [e.strip() for e in executors.split(",") if e.strip()] \
        if isinstance(executors, str) else list(executors)
    labels = [e if isinstance(e, str) else e.name for e in listed]
    if reference is None or "reference" in labels:
        return executors, None
    return [*listed, "reference"], (
        f"reference added to the executors ({', '.join(labels) or 'none'}): a reference "
        "function was given, so the kernel is checked against it")


def runners(names: Sequence[str | Executor], reference: Callable[..., Any] | None
             ) -> list[Executor]:
    checked = located(reference) if reference is not None else None
    runners = [get_executor(e, reference=checked) for e in names]
    if reference is None and any(r.name == "reference" for r in runners):
        raise ExecutorError("the reference executor needs a reference function: pass "
                            "reference=my_ref (same signature as the kernel function)")
    return runners


def check_executors(executors: Sequence[str | Executor] | str) -> list[str | Executor]:
    """The executors of a comparison, from names or one comma-separated string."""
    if isinstance(executors, str):
        executors = [e.strip() for e in executors.split(",") if e.strip()]
    names = list(executors)
    labels = [e if isinstance(e, str) else e.name for e in names]
    if len(names) < 2:
        raise ExecutorError(
            f"a comparison needs at least two executors; got {len(names)} "
            f"({', '.join(labels) or 'none'}). "
            f"Choose from {', '.join(executor_names())}, e.g. executors=\"interpret,reference\"")
    for label in labels:
        if labels.count(label) > 1:
            raise ExecutorError(f"executor {label!r} is listed twice in {labels}: each "
                                "executor runs once")
    return names


def check_tolerance(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or \
            not np.isfinite(value) or value < 0:
        raise ExecutorError(f"{name}={value!r}: a tolerance is a finite number >= 0")

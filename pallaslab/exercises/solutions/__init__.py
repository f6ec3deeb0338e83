"""A solution and typical wrong answers per exercise, one module per notebook.

`SOLUTIONS[name]` is a correct function; `WRONG[name]` lists (wrong function, a phrase its
diagnosis must contain). The tests run them all; the notebooks' collapsed cells show the
solutions' source.
"""

from collections.abc import Callable
from typing import Any

from pallaslab.exercises.solutions import (
    accumulators,
    attention,
    dmas,
    grids,
    prefetch,
    reductions,
)

_MODULES = (grids, accumulators, reductions, prefetch, attention, dmas)

SOLUTIONS: dict[str, Callable[..., Any]] = {
    k: v for m in _MODULES for k, v in m.SOLUTIONS.items()}
WRONG: dict[str, list[tuple[Callable[..., Any], str]]] = {
    k: v for m in _MODULES for k, v in m.WRONG.items()}

"""The precision a kernel body computes its matrix products in (read off its jaxpr)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pallaslab.model._jax.base import Jaxpr
from pallaslab.model._jax.chips import body_jaxprs, subjaxprs
from pallaslab.model._jax.equation_fields import call_site_of
from pallaslab.model.kernel import Kernel


def narrow_dots(kernel: Kernel) -> tuple[tuple[np.dtype, str | None], ...]:
    """(operand dtype, "file.py:LINE") of each `dot_general` of the kernel body whose operands
    are floats narrower than 32 bits (bfloat16, float16, float8: the products are rounded to
    that precision whatever type they accumulate in), narrowest first, each dtype once."""
    found: dict[str, tuple[np.dtype, str | None]] = {}
    for jaxpr in body_jaxprs(kernel):
        _collect(jaxpr, found)
    return tuple(sorted(found.values(), key=lambda d: d[0].itemsize))


def _collect(jaxpr: Jaxpr, found: dict[str, tuple[np.dtype, str | None]]) -> None:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            dtypes = [d for v in eqn.invars[:2] if (d := _float(v)) is not None]
            if len(dtypes) == 2 and all(d.itemsize < 4 for d in dtypes):
                narrow = min(dtypes, key=lambda d: d.itemsize)
                found.setdefault(narrow.name, (narrow, call_site_of(eqn)))
            continue
        for sub in subjaxprs(eqn):  # cond branches, loop bodies, nested calls
            _collect(sub, found)


def _float(var: Any) -> np.dtype | None:
    dtype = getattr(getattr(var, "aval", None), "dtype", None)
    if dtype is None:
        return None
    dt = np.dtype(dtype)
    return dt if "float" in dt.name and "complex" not in dt.name else None

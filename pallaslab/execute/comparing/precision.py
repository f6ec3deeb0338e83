"""Tolerances that follow the precision a kernel computes in.

A kernel whose matrix products take bfloat16 (or float16, float8) operands rounds every
product to that precision, whatever it accumulates in and whatever its output dtype: a
float32 output of bfloat16 products is as far from a float32 reference as a bfloat16 output
is. Unless the caller gives `rtol`, such an output is judged at the tolerance of the narrowest
operand dtype of the kernel's products (the table in `pallaslab.execute.comparing.comparison`), and
a note says so. The rounding of the inputs is relative to each product, so the rule of the
16-bit outputs (`atol = rtol * max|b|` unless given) holds for any contraction length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pallaslab.execute.comparing.pair import default_rtol
from pallaslab.model import Kernel, _jax
from pallaslab.model.source_names import short_source


def compute_rtol(kernel: Kernel | None, dtype: Any, origin: str, atol: float | None
                 ) -> tuple[float | None, str | None]:
    """The default rtol of a kernel output of `dtype` (None: the output dtype's own) and the
    note that says why."""
    dt = np.dtype(dtype)
    if kernel is None or "float" not in dt.name:
        return None, None
    try:
        dots = _jax.narrow_dots(kernel)
    except Exception:  # the body holds what the reading cannot follow: the dtype's rule
        return None, None
    if not dots:
        return None, None
    narrow, line = dots[0]
    rtol = default_rtol(narrow)
    if rtol <= default_rtol(dt):
        return None, None
    where = f" ({short_source(line)})" if line else ""
    absolute = f"{atol:.1e}" if atol is not None else f"{rtol:.1e} x max|expected|"
    return rtol, (f"{origin}: tolerance of {narrow.name} (rtol {rtol:.1e}, atol {absolute}): "
                  f"the kernel computes its matrix products in {narrow.name}{where}, not in "
                  f"{dt.name}")

"""Arrays as 2-D heatmap cells: the shaping the Compare and Step views share."""

from __future__ import annotations

import math
import warnings

import numpy as np


def to_2d(x: np.ndarray, *, squeeze: bool) -> tuple[np.ndarray, str | None]:
    """A 2-D view of an array: 0-D -> 1x1, 1-D -> one row, N-D -> its last two dims with the
    leading ones sliced at 0 (`squeeze`: drop size-1 dims first) or reduced by max."""
    x = np.asarray(x)
    if squeeze and x.ndim > 2:
        x = x.reshape([d for d in x.shape if d != 1] or [1])
    if x.ndim == 0:
        return x.reshape(1, 1), None
    if x.ndim == 1:
        return x.reshape(1, -1), None
    if x.ndim == 2:
        return x, None
    lead = x.ndim - 2
    if squeeze:
        return x[(0,) * lead], f"slice [{', '.join(['0'] * lead)}, :, :]"
    if x.size == 0:
        return x.reshape(x.shape[-2:]) if 0 in x.shape[-2:] else \
            np.zeros(x.shape[-2:], x.dtype), None
    return np.max(x, axis=tuple(range(lead))), f"max over the leading {lead} dim(s)"


def downsample(x: np.ndarray, side: int, how: str) -> tuple[np.ndarray, tuple[int, int]]:
    """Shrink a 2-D array to at most `side` cells a side by integer factors (`how`: "max" of
    each cell's elements, or "mean" of its finite ones)."""
    rows, cols = x.shape
    fr, fc = max(1, math.ceil(rows / side)), max(1, math.ceil(cols / side))
    if fr == 1 and fc == 1:
        return x, (1, 1)
    fill = -np.inf if how == "max" else np.nan
    pr, pc = -(-rows // fr) * fr, -(-cols // fc) * fc
    padded = np.full((pr, pc), fill, np.float64)
    padded[:rows, :cols] = x
    cells = padded.reshape(pr // fr, fr, pc // fc, fc)
    with np.errstate(invalid="ignore", all="ignore"):
        if how == "max":
            out = cells.max(axis=(1, 3))
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells stay NaN
                out = np.nanmean(cells, axis=(1, 3))
    return out, (fr, fc)

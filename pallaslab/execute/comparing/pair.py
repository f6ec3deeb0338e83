"""One output of two executors, compared element by element: errors, ULPs, NaNs, the
mismatched blocks and the grid programs that wrote them (see
`pallaslab.execute.comparing.comparison`
for the tolerances).

Statistics, per pair:

- `max_abs_err`: max |a - b|; a NaN on one side (or on both, unless `equal_nan`) is an
  infinite error (JSON null), and `nan_a` / `nan_b` count the NaNs of each side;
- `max_rel_err`: max |a - b| / |b| over the elements with |b| > atol only: a reference element
  within atol of zero is judged by atol alone, and its relative error (1e+302 for a denormal
  reference value) says nothing;
- `max_ulp`: representable values between a and b (integers: |a - b|, which the tables do not
  show as ULP);
- `rounding_note`: for 16-bit and narrower floats, whether the error is far beyond what
  rounding to the output dtype explains (see `rounding_note`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from pallaslab.analysis.tiling import OperandTiling, Tiling

DEFAULT_RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1.6e-2}
FLOAT8_RTOL = 1.25e-1
# The rounding rule: a kernel that computes in float32 and rounds each output once is within
# 1 ULP of a reference that does the same; correct kernels with 16-bit intermediates (flash
# attention casting its probabilities to bfloat16) have ~0.1% of their elements beyond 4 ULP,
# a bfloat16 accumulator ~5%. More than ROUNDING_FRACTION beyond ROUNDING_ULP is a warning.
ROUNDING_ULP = 4
ROUNDING_FRACTION = 0.01


def default_rtol(dtype: Any) -> float:
    dt = np.dtype(dtype)
    if dt.name in DEFAULT_RTOL:
        return DEFAULT_RTOL[dt.name]
    if "float8" in dt.name or "float4" in dt.name:
        return FLOAT8_RTOL
    if np.issubdtype(dt, np.complexfloating):
        return DEFAULT_RTOL["float64" if dt.itemsize == 16 else "float32"]
    return 0.0


@dataclasses.dataclass(frozen=True)
class PairComparison:
    """Executor `a` against executor `b` on one output."""

    a: str
    b: str
    max_abs_err: float
    max_rel_err: float  # over elements with |b| > atol (see the module's docstring)
    max_ulp: int
    mismatched_elements: int
    allclose: bool
    rtol: float
    atol: float
    abs_err: np.ndarray  # |a - b| (float64; inf where a NaN is involved, see above)
    mismatch: np.ndarray  # bool mask, the output's shape
    mismatched_blocks: tuple[tuple[int, ...], ...]  # output block indices with a mismatch
    programs: tuple[tuple[int, ...], ...]  # grid programs that wrote those blocks
    error: str | None = None  # one side did not run
    nan_a: int = 0  # NaN elements of a
    nan_b: int = 0  # NaN elements of b
    rounding_note: str | None = None  # the error is far beyond the output dtype's rounding

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a, "b": self.b, "max_abs_err": finite(self.max_abs_err),
            "max_rel_err": finite(self.max_rel_err), "max_ulp": int(self.max_ulp),
            "mismatched_elements": int(self.mismatched_elements),
            "allclose": bool(self.allclose), "rtol": self.rtol, "atol": self.atol,
            "mismatched_blocks": [list(b) for b in self.mismatched_blocks],
            "programs": [list(p) for p in self.programs],
            "error": self.error, "nan_a": int(self.nan_a), "nan_b": int(self.nan_b),
            "rounding_note": self.rounding_note,
        }


def compare_arrays(a: np.ndarray, b: np.ndarray, name_a: str = "a", name_b: str = "b",
                   ot: OperandTiling | None = None, tiling: Tiling | None = None, *,
                   rtol: float | None = None, atol: float | None = None,
                   equal_nan: bool = False, writers: np.ndarray | None = None
                   ) -> PairComparison:
    """Compare two arrays; with an output tiling, name the mismatched blocks and programs
    (with `writers`, each element's last storing program step, -1 for none: those that
    stored the mismatched elements). NaN equals NaN only with `equal_nan`."""
    a, b = np.asarray(a), np.asarray(b)
    wide_a, wide_b = _wide(a), _wide(b)
    rtol = default_rtol(b.dtype) if rtol is None else float(rtol)
    finite_b = np.abs(wide_b[np.isfinite(wide_b)]) if wide_b.size else np.zeros(0)
    scale = float(finite_b.max()) if finite_b.size else 0.0
    atol = rtol * scale if atol is None else float(atol)
    nan_a, nan_b = np.isnan(wide_a), np.isnan(wide_b)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(wide_a - wide_b)
        both_nan = nan_a & nan_b if equal_nan else np.zeros(diff.shape, bool)
        same_inf = np.isinf(wide_a) & (wide_a == wide_b)
        nan_mismatch = (nan_a | nan_b) & ~both_nan
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(nan_mismatch, np.inf, diff)
        close = (diff <= atol + rtol * np.abs(wide_b)) | both_nan | same_inf
        judged = (np.abs(wide_b) > atol) & (diff > 0)  # near-zero b: judged by atol alone
        rel = np.where(judged, diff / np.where(judged, np.abs(wide_b), 1.0), 0.0)
        rel = np.where(nan_mismatch, np.inf, rel)
    mismatch = ~close
    mismatched_blocks, programs = blocks_and_programs(mismatch, ot, tiling)
    if writers is not None and tiling is not None and writers.shape == mismatch.shape:
        steps = np.unique(writers[mismatch & (writers >= 0)]).astype(np.int64)
        programs = tuple(tiling.programs_at(steps))
    allclose = not mismatch.any()
    return PairComparison(
        a=name_a, b=name_b, max_abs_err=_max(diff), max_rel_err=_max(rel),
        max_ulp=ulp_distance(a, b, equal_nan=equal_nan),
        mismatched_elements=int(mismatch.sum()), allclose=allclose,
        rtol=rtol, atol=atol, abs_err=diff, mismatch=mismatch,
        mismatched_blocks=mismatched_blocks, programs=programs,
        nan_a=int(nan_a.sum()), nan_b=int(nan_b.sum()),
        rounding_note=rounding_note(a, b) if allclose else None,
    )


def rounding_note(a: np.ndarray, b: np.ndarray) -> str | None:
    """Why the error looks like a precision bug (None: rounding explains it), for floats of
    16 bits or fewer: more than ROUNDING_FRACTION of the elements are more than ROUNDING_ULP
    ULPs apart, each counted at its own magnitude (at least eps x max|b|, so elements near
    zero on the output's scale do not count the float32 noise of a correct kernel). Wider
    floats compute at their own precision: their error is the algorithm's, not a rounding's."""
    if a.dtype != b.dtype or not is_float(b.dtype) or b.dtype.itemsize > 2 or not b.size:
        return None
    wa, wb = a.astype(np.float64), b.astype(np.float64)
    both = np.isfinite(wa) & np.isfinite(wb)
    if not both.any():
        return None
    mag = np.abs(wb[both])
    eps = float(jnp.finfo(b.dtype).eps)
    floor = max(float(mag.max()) * eps, float(jnp.finfo(b.dtype).smallest_normal))
    ulp = 2.0 ** np.floor(np.log2(np.maximum(mag, floor))) * eps
    units = np.abs(wa[both] - wb[both]) / ulp
    beyond = float(np.mean(units > ROUNDING_ULP))
    if beyond <= ROUNDING_FRACTION:
        return None
    return (f"{100 * beyond:.1f}% of the elements differ by more than {ROUNDING_ULP} ULP of "
            f"{b.dtype} (up to {units.max():,.0f} ULP, at each element's magnitude), far beyond "
            f"rounding to {b.dtype}: a kernel computing in float32 and rounding once stays "
            f"within 1 ULP. Is something accumulated or computed in {b.dtype}? (within the "
            "tolerance: not a failure)")


def _wide(x: np.ndarray) -> np.ndarray:
    if np.issubdtype(x.dtype, np.complexfloating):
        return x.astype(np.complex128)
    return x.astype(np.float64)


def _max(x: np.ndarray) -> float:
    return float(np.nanmax(x)) if x.size and not np.all(np.isnan(x)) else (
        float("nan") if x.size else 0.0)


def finite(x: float) -> float | None:
    # JSON has no NaN or infinity: null (a NaN on one side only gives an infinite error).
    return float(x) if np.isfinite(x) else None


def ulp_distance(a: np.ndarray, b: np.ndarray, *, equal_nan: bool = True) -> int:
    """Largest number of representable values between corresponding elements (a NaN on one
    side, or on both unless `equal_nan`, counts as the dtype's whole range)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.size == 0:
        return 0
    if not is_float(a.dtype) or a.dtype != b.dtype:
        if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
            return int(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
        return 0
    bits: Any = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia = _ordered(a.view(bits))
    ib = _ordered(b.view(bits))
    dist = np.abs(ia - ib)
    nan_a, nan_b = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    dist = np.where(nan_a & nan_b, 0 if equal_nan else np.iinfo(bits).max, dist)
    dist = np.where(nan_a ^ nan_b, np.iinfo(bits).max, dist)
    return int(dist.max())


def is_float(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or "float" in np.dtype(dtype).name


def _ordered(i: np.ndarray) -> np.ndarray:
    """Float bit patterns (sign-magnitude) as integers in the floats' order."""
    wide = i.astype(np.int64)
    low = np.iinfo(i.dtype).min
    return np.where(wide < 0, low - wide, wide)


def blocks_and_programs(mismatch: np.ndarray, ot: OperandTiling | None, tiling: Tiling | None
                        ) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    if ot is None or tiling is None or not mismatch.any():
        return (), ()
    blocks: list[tuple[int, ...]] = []
    uniq, first = np.unique(ot.block_indices, axis=0, return_index=True)
    shape = np.asarray(ot.shape, np.int64)
    covered = np.zeros(mismatch.shape, bool)
    for row in np.argsort(first):
        start = ot.starts[first[row]]
        lo = np.clip(start, 0, shape)
        hi = np.clip(start + np.asarray(ot.extent, np.int64), 0, shape)
        region = tuple(slice(int(x), int(y)) for x, y in zip(lo, hi, strict=True))
        covered[region] = True
        if mismatch[region].any():
            blocks.append(tuple(int(v) for v in uniq[row]))
    # Mismatches no program's block covers (never written): their blocks, no programs.
    stray = np.argwhere(mismatch & ~covered)
    if len(stray):
        extent = np.maximum(np.asarray(ot.extent, np.int64), 1)
        blocks += [tuple(int(v) for v in b) for b in np.unique(stray // extent, axis=0)]
    steps = np.concatenate([ot.steps_with_block(b) for b in blocks]) if blocks else \
        np.zeros(0, np.int64)
    steps = steps.astype(np.int64)
    steps = np.unique(steps)
    return tuple(blocks), tuple(tiling.programs_at(steps))

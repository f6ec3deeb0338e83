"""Catalog kernels for the Triton backend, modelled on JAX's own Pallas GPU tests: whole-array
refs with masked `pl.ds` loads and stores, atomics, and a truly overlapping write.

Each case registers in the shared `CATALOG` (tag "gpu" plus the feature's own tag).
"""

from __future__ import annotations

__all__: list[str] = []

"""Catalog kernels that reproduce what production kernels (tokamax's) exposed: outputs narrower
than 128 lanes, constant-index operands, grids and scalar-prefetch values computed by an
earlier kernel from the concrete arguments.

Each case registers in the shared `CATALOG` (tag "production" plus the feature's own tag).
"""

from __future__ import annotations

__all__: list[str] = []

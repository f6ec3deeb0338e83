"""Catalog kernels for Mosaic GPU (`plgpu.kernel`, TMA copies, barriers, warp specialisation,
`plgpu.emit_pipeline`, a `pallas_call` with Mosaic GPU compiler params), modelled on JAX's own
Mosaic GPU Pallas tests.

Each case registers in the shared `CATALOG` (tag "mosaic-gpu" plus the feature's own tag) with
the pure-JAX `reference` its outputs must match.
"""

from __future__ import annotations

__all__: list[str] = []

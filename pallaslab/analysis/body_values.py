"""Values a TPU kernel body computes that are large enough to spill: beyond the vector
registers, the compiler may keep them in scoped VMEM beside the pipeline's buffers (the
`vmem-spill-risk` finding and the occupancy's note)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def storage_dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    # Booleans live as 32-bit words in VMEM (Mosaic has no i1 memrefs).
    return np.dtype(np.int32) if dt == np.bool_ else dt


# Values this large exceed what the vector registers hold; libtpu was measured to spill some
# of them (flash attention with 512x256 f32 scores: +0.9 MiB; a bf16 256x512x256 matmul on
# v5e: +76 KiB) and not others (a 512x512 f32 matmul result: nothing).
SPILL_RISK_BYTES = 256 * 1024


BodyValues = Sequence[tuple[tuple[int, ...], Any, str]]  # (shape, dtype, primitive)
Value = tuple[tuple[int, ...], str, int]  # (shape, dtype name, bytes)


def large_values(values: BodyValues) -> tuple[Value, ...]:
    """The body's values (`_jax.kernel_body_values`) of at least SPILL_RISK_BYTES, the four
    largest first. A value's own size: its layout is the compiler's choice (a trailing dim of
    1 is not padded to 128 lanes: libtpu compiles tokamax's RoPE, int32[128, 128, 1] values
    included, in exactly its 192 KiB of buffers)."""
    seen: dict[tuple[tuple[int, ...], str], int] = {}
    for shape, dtype, _ in values:
        size = math.prod(shape) * storage_dtype(dtype).itemsize
        if size >= SPILL_RISK_BYTES:
            seen[(shape, np.dtype(dtype).name)] = size
    ranked = sorted(seen.items(), key=lambda kv: -kv[1])
    return tuple((shape, dtype, size) for (shape, dtype), size in ranked[:4])


def largest_product(values: BodyValues) -> Value | None:
    """The largest matrix product among the body's values, if any of at least
    SPILL_RISK_BYTES: the MXU's result lands in VMEM whole before what uses it (flash
    attention's scores), where an elementwise value streams into its output (libtpu compiles
    `o[...] = x[...] * 2` over 64 MiB of buffers with no VMEM for the 16 MiB product)."""
    products = [(shape, np.dtype(dtype).name, math.prod(shape) * storage_dtype(dtype).itemsize)
                for shape, dtype, primitive in values if primitive == "dot_general"]
    big = [p for p in products if p[2] >= SPILL_RISK_BYTES]
    return max(big, key=lambda p: p[2]) if big else None

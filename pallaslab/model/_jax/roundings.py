"""A kernel body's explicit roundings kept in pallaslab's batched computations.

`x.astype(jnp.bfloat16).astype(jnp.float32)` rounds to bfloat16 on the chip and in JAX's
interpreters. XLA may drop such a round trip where excess precision is allowed; pallaslab
compiles without it (`running.compile_exact`), but jaxlib 0.12.0.1's CPU compiler drops the
round trip in straight-line code even so (a 64x128 row sum moved by up to 0.56). Here each
narrowing float conversion to bfloat16 is preceded by `lax.reduce_precision` to its bits: the
same rounding, to nearest even, as an operation no compiler elides. Not float16: XLA's
`reduce_precision` flushes what would be a float16 subnormal to zero (attention's small
probabilities), where the conversion keeps it; bfloat16's normal range is float32's.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax

from pallaslab.model._jax.trace import bind_eqn

# The narrow float type whose rounding `reduce_precision` gives exactly (float32's exponent,
# so no subnormal of its own is flushed).
_NARROW = (jnp.dtype(jnp.bfloat16),)


def is_narrowing_convert(eqn: Any) -> bool:
    """Is this a conversion from a wider float to bfloat16?"""
    if eqn.primitive is not lax.convert_element_type_p:
        return False
    src, dst = jnp.dtype(eqn.invars[0].aval.dtype), jnp.dtype(eqn.params["new_dtype"])
    return dst in _NARROW and jnp.issubdtype(src, jnp.floating) and src.itemsize > dst.itemsize


def rounded_convert(eqn: Any, invals: list[Any]) -> list[Any]:
    """The conversion, its rounding made explicit first."""
    info = jnp.finfo(eqn.params["new_dtype"])
    rounded = lax.reduce_precision(invals[0], exponent_bits=info.nexp, mantissa_bits=info.nmant)
    return bind_eqn(eqn, [rounded], eqn.params)

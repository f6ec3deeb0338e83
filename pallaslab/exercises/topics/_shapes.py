"""Small shapes: every check runs in a second or two on a CPU."""

import jax
import jax.numpy as jnp

F32 = jnp.float32


def f32(*shape: int) -> jax.ShapeDtypeStruct:
    """An abstract f32 argument: the comparison fills it with seeded random data."""
    return jax.ShapeDtypeStruct(shape, F32)

"""The element-wise ops and reductions of the grammar, each given once for JAX (`jnp`) and
once for NumPy, so the kernel and the model never share code."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

# name -> (arity, JAX version, NumPy version)
ELEMENTWISE = {
    "scale": (1, lambda x: x * 2.0 + 1.0, lambda x: x * 2.0 + 1.0),
    "square": (1, lambda x: x * x, lambda x: x * x),
    "relu": (1, lambda x: jnp.maximum(x, 0.0), lambda x: np.maximum(x, 0.0)),
    "tanh": (1, jnp.tanh, np.tanh),
    "add": (2, lambda x, y: x + y, lambda x, y: x + y),
    "mul": (2, lambda x, y: x * y, lambda x, y: x * y),
    "max": (2, jnp.maximum, np.maximum),
    "select": (2, lambda x, y: jnp.where(x > 0, x, y * 0.5),
               lambda x, y: np.where(x > 0, x, y * 0.5)),
}

# reduction name -> (initial value, JAX fold, NumPy fold)
REDUCTIONS = {
    "sum": (0.0, lambda a, v: a + v, lambda a, v: a + v),
    "max": (-np.inf, jnp.maximum, np.maximum),
}


def np_dtype(name: str) -> np.dtype:
    return np.dtype(jnp.dtype(name))

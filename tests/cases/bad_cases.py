"""Deliberately malformed kernel cases for the CLI's error messages."""

import jax
import jax.numpy as jnp

NOT_A_FUNCTION = 3


def returns_array():
    return jnp.ones(3)


def returns_one_tuple():
    return (lambda x: x,)


def fn_not_callable():
    return 42, (jnp.ones(3),)


def args_not_tuple():
    return (lambda x: x), jnp.ones(3)


def no_kernel():
    return (lambda x: jnp.sin(x)), (jax.ShapeDtypeStruct((8,), jnp.float32),)

"""Peers from pallas_vmap_test.py: `jax.vmap` of pallas_calls (the batch becomes a grid
dimension), run in interpret mode as the test's interpret class does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from registry import peer

ORIGIN = "pallas_vmap_test.py::PallasCallVmapTest::"


def _add_one_body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _add_one(x):
    return pl.pallas_call(_add_one_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=True)(x)


def _x(shape):
    return jax.random.normal(jax.random.key(0), shape, jnp.float32)


@peer("vmap", ORIGIN + "test_vmap_of_simple_kernel", backend="none",
      reference=lambda x: x + 1.0)
def vmap_of_simple_kernel():
    return jax.vmap(_add_one), (_x((4, 8, 128)),)


@peer("vmap", ORIGIN + "test_double_vmap_of_simple_kernel", backend="none",
      reference=lambda x: x + 1.0)
def double_vmap_of_simple_kernel():
    return jax.vmap(jax.vmap(_add_one)), (_x((2, 3, 8, 128)),)


def _add_body(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def _add(x, y):
    return pl.pallas_call(_add_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=True)(x, y)


@peer("vmap", ORIGIN + "test_vmap_of_simple_kernel_with_in_axes_None", backend="none",
      reference=lambda x, y: x + y[None])
def vmap_with_in_axes_none():
    return jax.vmap(_add, in_axes=(0, None)), (_x((4, 8, 128)), _x((8, 128)) * 2.0)


def _slice_body(x_ref, o_ref):
    o_ref[...] = x_ref[pl.ds(8, 8), :] * 2.0


def _slicing(x):
    return pl.pallas_call(_slice_body, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
                          interpret=True)(x)


@peer("vmap", ORIGIN + "test_vmap_of_slicing_kernel", backend="none",
      reference=lambda x: x[:, 8:16] * 2.0)
def vmap_of_slicing_kernel():
    return jax.vmap(_slicing), (_x((3, 16, 128)),)

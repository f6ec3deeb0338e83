"""Peers from tpu_fusible_matmul_test.py: a `fuser.fusible` matmul whose producers and
consumer `fuser.fuse` pulls into the kernel (prologue and epilogue fusions)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import fuser
from registry import peer

ORIGIN = "tpu_fusible_matmul_test.py::FusibleMatmulTest::"
BLOCK = 128


def _matmul_kernel(x_refs, y_refs, out_refs, o_ref, acc_ref, *, x_fn, y_fn, out_fn):
    i, j, k = (pl.program_id(a) for a in range(3))

    @pl.when(k == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    x = x_fn((i, j, k), (), jax.tree.map(lambda r: r[...], x_refs))
    y = y_fn((i, j, k), (), jax.tree.map(lambda r: r[...], y_refs))
    acc_ref[...] += jnp.dot(x, y, preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _write():
        (o_ref[...],) = out_fn((i, j, k), (), jax.tree.map(lambda r: r[...], out_refs),
                               acc_ref[...])


@fuser.fusible
def _fusible_matmul(x: fuser.Fusion, y: fuser.Fusion, out: fuser.Fusion | None):
    (m, kk), n = x.shape, y.shape[1]
    grid = (m // BLOCK, n // BLOCK, kk // BLOCK)
    acc = jax.ShapeDtypeStruct((m, n), jnp.float32)
    out = out if out is not None else (lambda z: (z,))
    x_fn, x_values, _ = fuser.get_fusion_values(x)
    y_fn, y_values, _ = fuser.get_fusion_values(y)
    out_fn, out_values, _ = fuser.get_fusion_values(out, acc)
    x_spec = pl.BlockSpec((BLOCK, BLOCK), lambda i, j, k: (i, k))
    y_spec = pl.BlockSpec((BLOCK, BLOCK), lambda i, j, k: (k, j))
    z_spec = pl.BlockSpec((BLOCK, BLOCK), lambda i, j, k: (i, j))
    x_fn, (x_specs,), _ = fuser.pull_block_spec(x_fn, x_spec, grid_len=3)(x_values)
    y_fn, (y_specs,), _ = fuser.pull_block_spec(y_fn, y_spec, grid_len=3)(y_values)
    (out_spec,) = fuser.push_block_spec(out, z_spec)(acc)
    out_fn, (out_value_specs, _), _ = fuser.pull_block_spec(out_fn, (out_spec,), grid_len=3)(
        out_values, acc)
    from jax.experimental.pallas import tpu as pltpu

    return pl.pallas_call(
        functools.partial(_matmul_kernel, x_fn=x_fn, y_fn=y_fn, out_fn=out_fn),
        out_shape=jax.eval_shape(out, acc)[0], grid=grid,
        in_specs=[x_specs, y_specs, out_value_specs], out_specs=out_spec,
        scratch_shapes=[pltpu.VMEM((BLOCK, BLOCK), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x_values, y_values, out_values)


def _xy():
    x = jax.random.normal(jax.random.key(0), (256, 256), jnp.float32)
    return x, jax.random.normal(jax.random.key(1), (256, 256), jnp.float32)


def _dot(x, y):
    return jnp.dot(x, y, precision="highest")


@peer("fuser", ORIGIN + "test_matmul", backend="tpu", reference=_dot)
def fusible_matmul():
    return jax.jit(fuser.fuse(lambda x, y: _fusible_matmul(x, y))), _xy()


@peer("fuser", ORIGIN + "test_matmul_with_activation", backend="tpu",
      reference=lambda x, y: jnp.maximum(_dot(x, y), 0.0))
def fusible_matmul_with_activation():
    return jax.jit(fuser.fuse(lambda x, y: jnp.maximum(_fusible_matmul(x, y), 0.0))), _xy()


@peer("fuser", ORIGIN + "test_matmul_with_bias", backend="tpu",
      reference=lambda x, y, b: _dot(x, y) + b)
def fusible_matmul_with_bias():
    return jax.jit(fuser.fuse(lambda x, y, b: _fusible_matmul(x, y) + b)), (
        *_xy(), jax.random.normal(jax.random.key(2), (256, 256), jnp.float32))

"""Kernels that ask the device while tracing: traced as on the chip named, said in the notes."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas.ops.tpu.ragged_paged_attention.tuned_block_sizes import (
    get_tpu_version,
)

import pallaslab
from pallaslab.errors import ChipNeededError


def _copy(block: int, x: jax.Array) -> jax.Array:
    spec = pl.BlockSpec((block, 128), lambda i: (i, 0))
    return pl.pallas_call(
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
        grid=(x.shape[0] // block,), in_specs=[spec], out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


def by_version(x: jax.Array) -> jax.Array:
    """As ragged paged attention v3 does: the TPU version picks the block, below 4 refused."""
    version = get_tpu_version()
    if version < 4:
        raise NotImplementedError("TPU version must be 4 or higher.")
    return _copy(256 if version >= 6 else 128, x)


def by_kind(x: jax.Array) -> jax.Array:
    """As megablox does: the device kind picks the block, a CPU path where it is not a TPU."""
    kind = jax.devices()[0].device_kind
    return _copy(64 if "TPU" not in kind else 256 if "v6" in kind else 128, x)


X = jnp.ones((512, 128), jnp.float32)


def _block(cap: pallaslab.Capture) -> tuple[int, ...]:
    return tuple(cap.kernels[0].inputs[0].block_shape)


@pytest.mark.parametrize("fn", [by_version, by_kind])
def test_the_block_a_kernel_chooses_by_the_device_follows_the_chip(fn):
    v5e, v6e = pallaslab.capture(fn, X, chip="v5e"), pallaslab.capture(fn, X, chip="v6e")
    assert (_block(v5e), _block(v6e)) == ((128, 128), (256, 128))
    assert v5e.kernels[0].traced_for_chip == "v5e"
    assert v6e.notes == ("traced as on TPU v6e: the kernel asked for the device kind",)


def test_what_the_device_says_is_restored_after_the_trace_even_on_error():
    def fails(x):
        jax.devices()[0].device_kind  # noqa: B018 -- the question is the point
        raise RuntimeError("the user's own")

    with pytest.raises(RuntimeError, match="the user's own"):
        pallaslab.capture(fails, X, chip="v5e")
    pallaslab.capture(by_kind, X, chip="v6e")
    assert jax.devices()[0].device_kind == "cpu"


def test_without_a_chip_a_kernel_that_refuses_the_cpu_is_told_to_name_one():
    with pytest.raises(ChipNeededError) as err:
        pallaslab.capture(by_version, X)
    assert str(err.value) == (
        "by_version(...) asked for the device kind while tracing and was told 'cpu' (this host "
        "has no TPU), then failed: NotImplementedError: TPU version must be 4 or higher. Pass "
        "the TPU chip to trace it as on that chip: --chip v5e (command line, %%pallas) or "
        "chip=\"v5e\" (pallaslab.capture, pallaslab.inspect).")


def test_without_a_chip_a_kernel_with_a_cpu_path_keeps_it_and_no_note():
    cap = pallaslab.capture(by_kind, X)
    assert _block(cap) == (64, 128) and cap.notes == () and cap.kernels[0].traced_for_chip is None


def test_a_kernel_that_does_not_ask_is_traced_as_is_with_a_chip():
    cap = pallaslab.capture(functools.partial(_copy, 128), X, chip="v6e")
    assert cap.kernels[0].traced_for_chip is None and cap.notes == ()

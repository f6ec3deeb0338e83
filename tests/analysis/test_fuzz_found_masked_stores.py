"""A class the differential fuzzer found (tests/fuzz): `check` with no `--target` passed
masked stores of bf16 data in kernels written for TPU, which JAX's TPU lowering refuses
("masked swap with non-32-bit data"), while the other TPU rules applied. The rule
`tpu-masked-store-dtype` now applies as `tpu-block-shape` does: an error for TPU kernels, a
warning for a kernel written for the interpreter only, nothing for GPU kernels or 32-bit data.
"""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt

import pallaslab
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.cli import main

CODE = "tpu-masked-store-dtype"
TPU = pltpu.CompilerParams(dimension_semantics=("parallel",))


def _half_masked(x_ref, o_ref):
    lane = jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)
    pltpu.store(o_ref, x_ref[...], mask=lane < 64)


def _masked_in_a_loop(x_ref, o_ref):
    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    def step(r, carry):
        lane = jax.lax.broadcasted_iota(jnp.int32, (1, 128), 1)
        pltpu.store(o_ref.at[pl.ds(r, 1)], x_ref[pl.ds(r, 1), :], mask=lane < r)
        return carry
    jax.lax.fori_loop(0, 8, step, 0)


def _call(body, dtype, **kwargs):
    spec = pl.BlockSpec((16, 128), lambda i: (i, 0))
    call = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((32, 128), dtype), grid=(2,),
                          in_specs=[spec], out_specs=spec, **kwargs)
    return call, (jnp.ones((32, 128), dtype),)


def bf16_masked_store_for_tpu():
    """The fuzzer's minimal kernel: a bf16 masked store, TPU compiler params."""
    return _call(_half_masked, jnp.bfloat16, compiler_params=TPU)


def _findings(fn, args, code=CODE):
    (insp,) = inspect_capture(pallaslab.capture(fn, *args))
    return [f for f in insp.findings if f.code == code]


@pytest.mark.parametrize(("body", "dtype", "kwargs"), [
    (_half_masked, jnp.bfloat16, {"compiler_params": TPU}),
    (_half_masked, jnp.bfloat16, {}),  # no compiler params, not interpret-only: TPU
    (_half_masked, jnp.int8, {"compiler_params": TPU}),
    (_masked_in_a_loop, jnp.bfloat16, {"compiler_params": TPU}),
], ids=["bf16-tpu-params", "bf16-no-params", "int8", "bf16-in-a-loop"])
def test_a_sub_32_bit_masked_store_in_a_tpu_kernel_is_an_error_without_a_target(
        body, dtype, kwargs):
    (found,) = _findings(*_call(body, dtype, **kwargs))
    assert found.severity == "error" and found.operand == "outputs"
    assert f"a masked store of {jnp.dtype(dtype)} data into o_ref (outputs) at " in found.message
    assert "masked swap with non-32-bit data" in found.message


def test_32_bit_masked_stores_are_clean():
    assert not _findings(*_call(_half_masked, jnp.float32, compiler_params=TPU))
    assert not _findings(*_call(_masked_in_a_loop, jnp.int32, compiler_params=TPU))


def test_an_interpret_only_kernel_gets_a_warning_not_an_error():
    (found,) = _findings(*_call(_half_masked, jnp.bfloat16, interpret=True))
    assert found.severity == "warning" and found.message.startswith("on TPU: ")


def _triton_masked(x_ref, o_ref):
    mask = jnp.arange(128) < 64
    plt.store(o_ref.at[pl.ds(0, 128)], plt.load(x_ref.at[pl.ds(0, 128)], mask=mask,
                                                other=0.0), mask=mask)


def test_a_gpu_kernel_is_not_judged_by_the_tpu_rule():
    call = pl.pallas_call(_triton_masked, out_shape=jax.ShapeDtypeStruct((128,), jnp.bfloat16),
                          grid=(1,), compiler_params=plt.CompilerParams(num_warps=4))
    assert not _findings(call, (jnp.ones((128,), jnp.bfloat16),))


def test_check_without_a_target_fails_the_fuzzer_s_kernel(capsys):
    case = f"{__file__}:bf16_masked_store_for_tpu"
    assert main(["check", case]) == 1
    assert CODE in capsys.readouterr().out

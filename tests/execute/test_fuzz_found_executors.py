"""Classes of executor disagreement and noise the differential fuzzer found (tests/fuzz), each
held by its minimal kernel:

1. `vectorized` compiled with XLA's excess precision dropped a kernel's explicit bf16 round
   trip beside a reduction that the interpreter keeps: a correct kernel mismatched.
2. JAX's TPU interpreter refusing kernels Mosaic compiles (a "parallel" grid dimension after
   an "arbitrary" one; a masked store into an (8, 5) block it calls out of bounds) was a
   *failed* run; it is the executor being unavailable with JAX's reason.
4. JAX's tracebacks of failed host callbacks (one per callback) reached stderr above the
   verdict when an interpreter ran in the caller's process.
"""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.execute.executors import capabilities
from pallaslab.execute.executors.vectorized import VectorizedExecutor
from pallaslab.execute.prepared import prepare
from pallaslab.execute.worker import running
from pallaslab.execute.worker.running import CallbackErrors

# --- 1. explicit rounding through bf16 beside a reduction ------------------------------------


def _rounded_row_sum(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.sum(x.astype(jnp.bfloat16).astype(jnp.float32) * 1.1, axis=-1,
                         keepdims=True)


def _rounded_sums(x):
    return pl.pallas_call(
        _rounded_row_sum, out_shape=jax.ShapeDtypeStruct((x.shape[0], 1), jnp.float32),
        grid=(x.shape[0] // 8,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 1), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x)


def _rounding_input(rows=64):
    return jax.random.normal(jax.random.key(0), (rows, 128), jnp.float32) * 10


def _rounded_model(x):
    rounded = np.asarray(jnp.asarray(x).astype(jnp.bfloat16).astype(jnp.float32))
    return np.sum(rounded * np.float32(1.1), axis=-1, keepdims=True)


def test_vectorized_keeps_an_explicit_bf16_rounding_as_the_interpreter_does():
    x = _rounding_input()
    result = pallaslab.compare(_rounded_sums, x, executors="vectorized,interpret")
    assert result.complete and result.passed, result.verdict()
    vec, interp = (np.asarray(r.outputs[0]) for r in result.results)
    # Dropping the round trip moved sums by up to 0.56 (3e-5 is the sums' reassociation).
    np.testing.assert_allclose(vec, interp, rtol=0, atol=1e-4)
    np.testing.assert_allclose(vec, _rounded_model(x), rtol=0, atol=1e-4)
    assert result.results[0].batching[0].how == "batched"


def test_vectorized_says_so_where_xla_refuses_exact_precision(monkeypatch):
    running.clear_compile_cache()
    monkeypatch.setattr(running, "EXACT_PRECISION", {"xla_no_such_option_for_a_test": False})
    x = _rounding_input(rows=40)
    result = VectorizedExecutor().execute(prepare(_rounded_sums, (x,), {}, seed=0))
    running.clear_compile_cache()
    assert result.status == "ran"
    (note,) = [n for n in result.notes if "excess precision" in n]
    assert note.startswith("compiled with XLA's excess precision allowed (")
    assert "xla_no_such_option_for_a_test" in note


# --- 2. JAX's TPU interpreter's own limits ---------------------------------------------------


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _parallel_after_arbitrary(x):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    return pl.pallas_call(
        _add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2, 2),
        in_specs=[spec], out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "parallel")))(x)


def _lane_masked_store(x_ref, o_ref):
    lane = jax.lax.broadcasted_iota(jnp.int32, (8, 5), 1)
    o_ref[...] = jnp.zeros((8, 5), jnp.float32)
    pltpu.store(o_ref, x_ref[...], mask=lane < 3)


def _narrow_masked_store(x):
    spec = pl.BlockSpec((8, 5), lambda i: (i, 0))
    return pl.pallas_call(
        _lane_masked_store, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
        in_specs=[spec], out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x)


PREFIX = "Dimensions with parallel semantics must form a prefix of the grid"


@pytest.mark.parametrize(("fn", "shape", "jax_says"), [
    (_parallel_after_arbitrary, (16, 256), PREFIX),
], ids=["parallel-after-arbitrary"])
def test_tpu_interpreter_limits_make_it_unavailable_not_failed(fn, shape, jax_says):
    x = jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape)
    result = pallaslab.compare(fn, x, executors="vectorized,tpu-interpret")
    tpu = result.result("tpu-interpret")
    assert tpu.status == "unavailable" and tpu.error is None
    assert jax_says in tpu.unavailable
    assert "a limit of the interpreter, not a fault of the kernel" in tpu.unavailable
    assert not result.complete and not result.passed
    assert result.outcome != "passed"
    assert jax_says in result.verdict() and "failed" not in result.verdict()
    assert not result.kernel_errors


def test_a_masked_store_to_a_narrow_block_runs_under_tpu_interpret_mode():
    """JAX's bounds check of a masked store compares every dimension of the mask with the
    first ("Out-of-bounds masked swap" for an (8, 5) block): the executor's copy of the body
    stores through a read of the block instead (`model/_jax/ref_views.py`)."""
    x = jnp.arange(16 * 5, dtype=jnp.float32).reshape(16, 5)
    expected = jnp.where(jnp.arange(5) < 3, x, 0.0)
    result = pallaslab.compare(_narrow_masked_store, x, executors="vectorized,tpu-interpret",
                               reference=lambda x: expected)
    assert result.complete and result.passed, result.statuses


def test_parallel_after_arbitrary_is_known_before_running():
    cap = pallaslab.capture(_parallel_after_arbitrary, jnp.ones((16, 256), jnp.float32))
    why = capabilities.tpu_interpreter_refusal(cap)
    assert why is not None and PREFIX in why and "dimension 1" in why
    assert capabilities.parallel_after_other(("parallel", "arbitrary")) is None
    assert capabilities.parallel_after_other(("core_parallel", "parallel")) == 1
    # A default comparison pairs the executor with interpret mode instead.
    result = pallaslab.compare(_parallel_after_arbitrary, jnp.ones((16, 256), jnp.float32))
    assert result.executors == ("vectorized", "interpret") and result.passed


@pytest.mark.parametrize(("swapped", "shape", "jax_limit"), [
    ("()", "(8, 5)", True),
    ("(slice(0, 8, 1), slice(0, 5, 1))", "(8, 5)", True),
    ("(3, slice(0, 5, None))", "(8, 5)", True),
    ("(slice(4, 12, 1), slice(0, 128, 1))", "(8, 128)", False),  # truly past the end
    ("(9, slice(0, 5, None))", "(8, 5)", False),
    ("(Ellipsis,)", "(8, 5)", False),  # a form not read: not judged JAX's
])
def test_a_masked_store_out_of_bounds_is_jax_s_only_inside_the_buffer(swapped, shape,
                                                                        jax_limit):
    message = (f"XlaRuntimeError: ... ValueError: Out-of-bounds masked swap of (0 0 vmem 3): "
               f"swapping [{swapped}] but buffer has shape {shape} . ")
    why = capabilities.unimplemented(capabilities.TPU_INTERPRETER, message, [])
    assert (why is not None) == jax_limit
    assert capabilities.unimplemented("JAX's HLO interpreter (interpret=True)", message,
                                      []) is None  # another interpreter's error is not it


# --- 4. JAX's callback tracebacks ------------------------------------------------------------


def _skips_last_block(x_ref, o_ref):
    @pl.when(pl.program_id(0) != 3)
    def _():
        o_ref[...] = x_ref[...] * 2


def _reads_past_the_end(x):
    # int32 output left unwritten (its fill is re-checked in this process under TPU
    # interpret mode), read through an index map that runs past the input's end.
    return pl.pallas_call(
        _skips_last_block, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i + 1, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x)


def test_callback_tracebacks_stay_out_of_the_log_and_stderr(caplog, capfd):
    x = jnp.arange(32 * 128, dtype=jnp.int32).reshape(32, 128)
    with caplog.at_level(logging.ERROR):
        result = pallaslab.compare(_reads_past_the_end, x, executors="vectorized,interpret")
    assert "unwritten-output" in {f.code for f in result.kernel_errors}
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "callback failed" not in err
    assert CallbackErrors.logger().propagate and CallbackErrors._active == 0


def test_callback_errors_are_kept_for_a_note_and_the_logger_restored(caplog):
    def fail(x):
        raise ValueError("a callback's own failure")

    logger = CallbackErrors.logger()
    with caplog.at_level(logging.ERROR), CallbackErrors() as outer, CallbackErrors() as inner:
        with pytest.raises(Exception, match="a callback's own failure"):
            jax.block_until_ready(jax.experimental.io_callback(
                fail, jax.ShapeDtypeStruct((), jnp.float32), 1.0))
        assert not logger.propagate
    assert logger.propagate and inner not in logger.handlers and outer not in logger.handlers
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()]
    assert outer.count == inner.count == 1
    assert "ValueError: a callback's own failure" in (outer.note() or "")

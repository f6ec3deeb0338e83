"""`pallaslab compare`: exit status by who is at fault (1: the kernel, 2: the comparison was not
made), the reference always checked, and an honest table (NaN, ULP of integers, warnings)."""

import json
import textwrap

import pytest

from pallaslab.cli import main

CASES = textwrap.dedent('''
    import functools
    import jax, jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    X = jnp.arange(256 * 128, dtype=jnp.float32).reshape(256, 128) / 1000.0

    def _double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def _blocks(index_map, dtype=jnp.float32):
        return lambda x: pl.pallas_call(
            _double, out_shape=jax.ShapeDtypeStruct(x.shape, dtype), grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), index_map)],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)))(x)

    def reverse_negative():
        return _blocks(lambda i: (-1 - i, 0)), (X,)

    def reversed_double(x):
        return 2.0 * x.reshape(4, 64, 128)[::-1].reshape(256, 128)

    def double():
        return _blocks(lambda i: (i, 0)), (X,)

    def double_ref(x):
        return 2.0 * x

    def minus(x):
        return x - 1.0

    def bare_raise(x):
        raise NotImplementedError

    def _nan(x_ref, o_ref):
        o_ref[...] = jnp.log(x_ref[...] - 1e9)

    def nans():
        return _blocks_of(_nan), (X,)

    def _blocks_of(kernel, dtype=jnp.float32):
        return lambda x: pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, dtype), grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)))(x)

    def _to_int(x_ref, o_ref):
        o_ref[...] = (x_ref[...] * 1000.0).astype(jnp.int32)

    def ints():
        return _blocks_of(_to_int, jnp.int32), (X,)

    def ints_off_by_one(x):
        return (x * 1000.0).astype(jnp.int32) + 1

    def _wait_twice(x_hbm, o_hbm, buf, sem):
        copy = pltpu.make_async_copy(x_hbm, buf, sem.at[0])
        copy.start()
        copy.wait()
        copy.wait()  # waits for a second copy that never starts
        pltpu.sync_copy(buf, o_hbm)

    def wait_twice():
        any_ = pl.BlockSpec(memory_space=pl.ANY)
        return (lambda x: pl.pallas_call(
            _wait_twice, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[any_], out_specs=any_,
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32),
                            pltpu.SemaphoreType.DMA((1,))])(x)), (X[:8],)

    def copy_ref(x):
        return x

    def _mm_bf16_acc(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...]).astype(acc_ref.dtype)  # bf16 sums
        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def mm_bf16_acc():
        x = jax.random.normal(jax.random.key(0), (64, 1024), jnp.bfloat16)
        y = jax.random.normal(jax.random.key(1), (1024, 128), jnp.bfloat16)
        fn = lambda x, y: pl.pallas_call(
            _mm_bf16_acc, out_shape=jax.ShapeDtypeStruct((64, 128), x.dtype), grid=(1, 1, 8),
            in_specs=[pl.BlockSpec((64, 128), lambda i, j, k: (i, k)),
                      pl.BlockSpec((128, 128), lambda i, j, k: (k, j))],
            out_specs=pl.BlockSpec((64, 128), lambda i, j, k: (i, j)),
            scratch_shapes=[pltpu.VMEM((64, 128), jnp.bfloat16)])(x, y)
        return fn, (x, y)

    def mm_ref(x, y):
        return jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype)
''')


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    path = tmp_path_factory.mktemp("verdicts") / "verdict_cases.py"
    path.write_text(CASES)
    return str(path)


def compare(cases, case, reference=None, *options):
    argv = ["compare", f"{cases}:{case}", *options]
    return main([*argv, "--reference", f"{cases}:{reference}"] if reference else argv)


def test_static_out_of_bounds_blocks_exit_1_with_the_check_message(cases, capsys):
    assert compare(cases, "reverse_negative", "reversed_double") == 1
    out = " ".join(capsys.readouterr().out.split())
    # worded as the Compare view words it (views/compare_tree.py)
    assert ("Findings of the runs static analysis: error block-out-of-bounds (args[0]): args[0]: "
            "4 program(s) use a block outside the array (256, 128) (block shape (64, 128)); "
            "e.g. program (0,) gets block index (-1, 0)") in out
    assert out.endswith("all close, but static analysis found errors: block-out-of-bounds")


def test_a_deadlock_is_the_kernels_error_exit_1(cases, capsys):
    status = compare(cases, "wait_twice", "copy_ref", "--executors",
                     "tpu-interpret,reference", "--json")
    payload = json.loads(capsys.readouterr().out)
    assert status == 1 and "error" not in payload
    assert (payload["complete"], payload["passed"], payload["outcome"]) == (
        False, False, "errors")
    assert payload["verdict"].startswith(
        "KERNEL ERROR: the runs found errors: deadlock; only 1 of 2 executor(s) ran, nothing "
        "was compared with two: tpu-interpret: stopped by the kernel's deadlock")


def test_a_reference_that_raises_is_incomplete_exit_2(cases, capsys):
    # (line 35 of the case file: its `raise NotImplementedError`)
    status = compare(cases, "double", "bare_raise", "--executors",
                     "interpret,vectorized,reference")
    out, err = capsys.readouterr()
    assert status == 2 and "all close" not in out
    err = " ".join(err.split())
    assert ("error: INCOMPLETE: reference did not run, so the kernel was not checked against "
            "its reference: reference: failed (the reference bare_raise raised "
            "NotImplementedError: (no message) raised at ") in err
    assert "verdict_cases.py:35 (bare_raise)); only interpret and vectorized were compared" in err


def test_the_reference_is_added_when_executors_lack_it(cases, capsys):
    assert compare(cases, "double", "minus", "--executors", "interpret,vectorized") == 1
    out = " ".join(capsys.readouterr().out.split())
    assert ("note: reference added to the executors (interpret, vectorized): a reference "
            "function was given, so the kernel is checked against it") in out
    assert out.endswith("MISMATCH")


def _row(out, a, b):
    return next(line.split("│") for line in out.splitlines()
                if line.split("│")[0].strip() == a and line.split("│")[1].strip() == b)


def test_nan_outputs_are_counted_per_side_not_shown_as_inf(cases, capsys):
    assert compare(cases, "nans", "double_ref", "--executors", "interpret,reference") == 1
    out = capsys.readouterr().out
    assert "NaN a / b" in out and "inf" not in out
    cells = [c.strip() for c in _row(out, "interpret", "reference")]
    # max abs, max rel, max ulp, NaN a / b, mismatched
    assert cells[2:7] == ["nan", "nan", "-", "32,768 / 0", "32,768"]


def test_integer_outputs_show_no_ulp(cases, capsys):
    assert compare(cases, "ints", "ints_off_by_one", "--executors", "interpret,reference") == 1
    out = capsys.readouterr().out
    assert "NaN a / b" not in out  # no NaN anywhere: no column
    cells = [c.strip() for c in _row(out, "interpret", "reference")]
    assert cells[2:6] == ["1", "1", "-", "32,768"]


def test_a_bf16_accumulator_passes_with_a_precision_warning(cases, capsys):
    assert compare(cases, "mm_bf16_acc", "mm_ref", "--executors", "vectorized,reference") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("warning: outputs: vectorized vs reference: " in out and "of the elements differ by "
            "more than 4 ULP of bfloat16" in out)
    assert "Is something accumulated or computed in bfloat16?" in out
    assert out.endswith("all close")

"""Compare: errors, tolerances, ULPs, and mismatches traced to the programs that wrote them."""

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from kernels import CATALOG, shifted_block_reference

import pallaslab
from pallaslab.cli import main
from pallaslab.execute import ExecutorError
from pallaslab.execute.comparison import compare_arrays, default_rtol, ulp_distance

KERNELS = Path(__file__).with_name("kernels.py")


def test_the_wrong_kernel_is_traced_to_exactly_the_program_that_wrote_it():
    fn, args = CATALOG["shifted_block_wrong"].case()
    result = pallaslab.compare(fn, *args, executors=("interpret", "tpu-interpret", "reference"),
                               reference=shifted_block_reference)
    (out,) = result.outputs
    assert out.origin == "outputs" and out.block_shape == (64, 128)
    by_pair = {(p.a, p.b): p for p in out.pairs}
    assert by_pair["interpret", "tpu-interpret"].allclose
    for a in ("interpret", "tpu-interpret"):
        pair = by_pair[a, "reference"]
        assert not pair.allclose
        assert pair.mismatched_blocks == ((2, 0),)
        assert pair.programs == ((2,),)
        assert pair.mismatch[128:192].all() and pair.mismatch.sum() == 64 * 128
        assert pair.mismatched_elements == 64 * 128
        x = np.asarray(args[0])
        assert pair.max_abs_err == pytest.approx(float(np.abs(2 * x[192:] - 2 * x[128:192]).max()))
    assert result.mismatched_programs() == ((2,),)
    assert not result.allclose


def test_matmul_mismatch_names_every_program_of_the_reduction():
    fn, args = CATALOG["matmul_f32"].case()
    x, y = (np.asarray(a) for a in args)
    wrong = x @ y
    wrong[130, 260] += 1.0  # inside output block (1, 2)

    result = pallaslab.compare(fn, *args, executors=("interpret", "reference"),
                               reference=lambda a, b: jnp.asarray(wrong))
    (pair,) = result.outputs[0].pairs
    assert pair.mismatched_blocks == ((1, 2),)
    assert pair.programs == ((1, 2, 0), (1, 2, 1))  # the k-steps accumulating into it
    assert pair.mismatched_elements == 1


def test_default_tolerances_are_dtype_aware_and_overridable():
    assert default_rtol(np.float32) == 1e-5 and default_rtol(jnp.bfloat16) == 1.6e-2
    assert default_rtol(np.int32) == 0.0
    a = np.array([100.0, 1e-3], np.float32)
    b = np.array([100.0005, 0.0], np.float32)
    pair = compare_arrays(a, b)
    assert pair.atol == pytest.approx(1e-5 * 100.0005)  # rtol x max|b|
    assert pair.allclose  # the tiny entry is judged on the output's scale
    strict = compare_arrays(a, b, atol=0.0)
    assert not strict.allclose and strict.mismatch.tolist() == [False, True]
    assert compare_arrays(a, b, rtol=0.0, atol=0.0).mismatched_elements == 2
    ints = compare_arrays(np.array([1, 2]), np.array([1, 3]))
    assert not ints.allclose and ints.max_ulp == 1


def test_ulp_distance():
    one = np.float32(1.0)
    nxt = np.nextafter(one, np.float32(2.0))
    assert ulp_distance(np.array([one]), np.array([nxt])) == 1
    assert ulp_distance(np.array([-0.0], np.float32), np.array([0.0], np.float32)) == 0
    tiny = np.nextafter(np.float32(0), np.float32(1))
    assert ulp_distance(np.array([-tiny]), np.array([tiny])) == 2
    bf = np.array([1.0], jnp.bfloat16)
    assert ulp_distance(bf, np.array([1.0 + 2.0**-7], jnp.bfloat16)) == 1  # 8-bit mantissa
    nan = compare_arrays(np.array([np.nan, 1.0]), np.array([np.nan, np.nan]))
    assert nan.mismatch.tolist() == [True, True] and nan.max_abs_err == np.inf  # NaN != NaN
    nan = compare_arrays(np.array([np.nan, 1.0]), np.array([np.nan, np.nan]), equal_nan=True)
    assert nan.mismatch.tolist() == [False, True] and nan.max_abs_err == np.inf


def test_unwritten_output_blocks_are_reported_without_programs():
    fn, args = CATALOG["uncovered_output"].case()
    result = pallaslab.compare(fn, *args, executors=("interpret", "reference"),
                               reference=lambda x: 2 * x)
    (pair,) = result.outputs[0].pairs
    assert pair.mismatched_blocks == ((2, 0), (3, 0)) and pair.programs == ()


def test_unavailable_executors_are_listed_but_not_paired():
    fn, args = CATALOG["elementwise_1d"].case()
    result = pallaslab.compare(fn, *args, executors=("interpret", "device", "tpu-interpret"))
    assert result.executors == ("interpret", "device", "tpu-interpret")
    assert result.result("device").unavailable.startswith("no TPU or GPU is attached")
    assert [(p.a, p.b) for p in result.outputs[0].pairs] == [("interpret", "tpu-interpret")]


def test_reference_executor_needs_a_reference():
    fn, args = CATALOG["elementwise_1d"].case()
    with pytest.raises(ExecutorError, match="the reference executor needs a reference function"):
        pallaslab.compare(fn, *args, executors=("interpret", "reference"))


def test_cli_json_follows_the_contract(tmp_path, capsys):
    ref = tmp_path / "ref.py"
    ref.write_text("def double(x):\n    return 2.0 * x\n")
    status = main(["compare", f"{KERNELS}:shifted_block_wrong", "--executors",
                   "interpret,tpu-interpret,reference", "--reference", f"{ref}:double", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert status == 1
    assert payload["executors"] == ["interpret", "tpu-interpret", "reference"]
    (out,) = payload["outputs"]
    assert out["origin"] == "outputs"
    pairs = {(p["a"], p["b"]): p for p in out["pairs"]}
    assert set(pairs) == {("interpret", "tpu-interpret"), ("interpret", "reference"),
                          ("tpu-interpret", "reference")}
    for p in pairs.values():
        assert {"a", "b", "max_abs_err", "max_rel_err", "mismatched_elements", "allclose",
                "mismatched_blocks", "programs"} <= set(p)
    bad = pairs["interpret", "reference"]
    assert bad["allclose"] is False and bad["mismatched_elements"] == 8192
    assert bad["mismatched_blocks"] == [[2, 0]] and bad["programs"] == [[2]]
    assert pairs["interpret", "tpu-interpret"]["allclose"] is True


def test_cli_human_output_and_bad_reference(tmp_path, capsys):
    # One executor ran: incomplete, never a pass (exit 2).
    status = main(["compare", f"{KERNELS}:elementwise_1d", "--executors", "interpret,device"])
    text = capsys.readouterr().out
    assert status == 2
    assert "device: unavailable (no TPU or GPU is attached" in text
    status = main(["compare", f"{KERNELS}:elementwise_1d", "--reference",
                   f"{tmp_path}/nope.py:ref"])
    assert status == 2
    assert "reference" in capsys.readouterr().err

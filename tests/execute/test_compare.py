"""Compare: errors, tolerances, ULPs, and mismatches traced to the programs that wrote them."""

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from kernels import CATALOG, rand, scale_kernel, shifted_block_reference

import pallaslab
from pallaslab.cli import main
from pallaslab.execute import ExecutorError
from pallaslab.execute.comparing.pair import compare_arrays, default_rtol, ulp_distance

KERNELS = Path(__file__).parents[1] / "kernels.py"
GPU_RACE = "overlapping_stores"  # a Triton kernel whose programs store the same elements


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
    assert re.search(r"device +. unavailable +. +- +. no TPU or GPU is attached", text), text
    status = main(["compare", f"{KERNELS}:elementwise_1d", "--reference",
                   f"{tmp_path}/nope.py:ref"])
    assert status == 2
    assert "reference" in capsys.readouterr().err


# --- the reference given is always checked; a named executor that did not run is no pass ----


def minus_one(x):
    return x - 1.0


def test_a_reference_given_is_compared_even_when_not_listed():
    fn, args = CATALOG["elementwise_1d"].case()
    result = pallaslab.compare(fn, *args, executors="interpret,vectorized", reference=minus_one)
    assert result.executors == ("interpret", "vectorized", "reference")
    assert result.outcome == "mismatch" and not result.passed
    assert ("reference added to the executors (interpret, vectorized): a reference function "
            "was given, so the kernel is checked against it") in result.notes
    alone = pallaslab.compare(fn, *args, executors=["interpret"], reference=minus_one)
    assert alone.executors == ("interpret", "reference") and alone.outcome == "mismatch"


def bare_raise(x):
    raise NotImplementedError


def test_a_reference_that_raises_makes_the_comparison_incomplete_and_names_its_line():
    fn, args = CATALOG["elementwise_1d"].case()
    result = pallaslab.compare(fn, *args, executors="interpret,vectorized,reference",
                               reference=bare_raise)
    assert result.ran == ("interpret", "vectorized")
    assert (result.complete, result.allclose, result.passed, result.outcome) == (
        False, False, False, "incomplete")
    line = bare_raise.__code__.co_firstlineno + 1
    assert result.verdict() == (
        "INCOMPLETE: reference did not run, so the kernel was not checked against its "
        "reference: reference: failed (the reference bare_raise raised NotImplementedError: "
        f"(no message) raised at {__file__}:{line} (bare_raise)); only interpret and "
        "vectorized were compared")
    payload = result.to_json()
    assert (payload["complete"], payload["passed"], payload["outcome"]) == (
        False, False, "incomplete")
    assert payload["required"] == ["interpret", "vectorized", "reference"]


def test_a_named_executor_that_cannot_run_here_makes_the_comparison_incomplete():
    fn, args = CATALOG["elementwise_1d"].case()
    result = pallaslab.compare(fn, *args, executors="interpret,device,vectorized")
    assert result.outcome == "incomplete" and not result.passed
    assert result.verdict().startswith(
        "INCOMPLETE: device did not run, so the kernel was not checked against it: device: "
        "unavailable (no TPU or GPU is attached")
    assert result.verdict().endswith("; only interpret and vectorized were compared")


# --- the kernel's own errors: static findings, and runs the kernel stopped -----------------


def reverse_blocks(index_map):
    def fn(x):
        return pl.pallas_call(
            scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), index_map)],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)))(x)
    return fn


def reversed_double(x):
    return 2.0 * x.reshape(4, 64, 128)[::-1].reshape(256, 128)


def test_out_of_bounds_blocks_fail_the_comparison_although_the_runs_agree():
    x = np.asarray(rand((256, 128)))
    wrong = pallaslab.compare(reverse_blocks(lambda i: (-1 - i, 0)), x,
                              executors="vectorized,reference", reference=reversed_double)
    # interpret mode wraps block -1 to the last block: the values agree with the reference
    assert wrong.complete and all(p.allclose for o in wrong.outputs for p in o.pairs)
    assert (wrong.allclose, wrong.passed, wrong.outcome) == (True, False, "errors")
    assert wrong.verdict() == "all close, but static analysis found errors: block-out-of-bounds"
    (static,) = wrong.static_findings
    assert static.finding.code == "block-out-of-bounds" and static.name == "scale_kernel"
    assert ("args[0]: 4 program(s) use a block outside the array (256, 128) (block shape "
            "(64, 128)); e.g. program (0,) gets block index (-1, 0)") in static.finding.message
    assert any(n.startswith("block-out-of-bounds (static analysis, as `pallaslab check`): "
                            "interpret mode wraps a negative block index") for n in wrong.notes)
    assert wrong.to_json()["static_findings"][0]["code"] == "block-out-of-bounds"
    right = pallaslab.compare(reverse_blocks(lambda i: (3 - i, 0)), x,
                              executors="vectorized,reference", reference=reversed_double)
    assert right.passed and right.static_findings == () and right.verdict() == "all close"


def test_parallel_write_conflicts_count_on_gpu_and_on_tpu_as_check_counts_them():
    from pallaslab.analysis import find, tile
    from pallaslab.analysis.inspection import inspect_kernel
    from pallaslab.execute.comparing.static_checks import check_errors

    (tpu,) = pallaslab.capture(*_flat(CATALOG["racy_parallel_accumulate"].case()))
    assert "parallel-write-conflict" in {f.code for f in find(tpu, tile(tpu))}
    # compare counts what `pallaslab check` reports: the same errors, from the same function
    (on_tpu,) = check_errors(inspect_kernel(tpu))
    assert on_tpu.finding.code == "parallel-write-conflict"
    (gpu,) = pallaslab.capture(*_flat(CATALOG[GPU_RACE].case()))
    (found,) = check_errors(inspect_kernel(gpu))  # every GPU runs its programs at once
    assert found.finding.code == "parallel-write-conflict" and found.kernel == 0


def test_a_run_the_kernel_stopped_is_a_kernel_error_not_an_incomplete_comparison():
    import dataclasses

    from pallaslab.analysis.findings import Finding

    fn, args = CATALOG["elementwise_1d"].case()
    c = pallaslab.compare(fn, *args, executors="interpret,tpu-interpret")
    deadlock = Finding("deadlock", "error", "the kernel is blocked for good: it waits on "
                       "semaphore scratch[2][0] at k.py:29")
    stopped = dataclasses.replace(c.result("tpu-interpret"), outputs=None,
                                  error=f"deadlock: {deadlock.message}", findings=(deadlock,))
    dead = dataclasses.replace(c, results=(c.result("interpret"), stopped),
                               outputs=tuple(dataclasses.replace(o, pairs=()) for o in c.outputs))
    assert (dead.complete, dead.passed, dead.outcome) == (False, False, "errors")
    assert dead.verdict() == (
        "KERNEL ERROR: the runs found errors: deadlock; only 1 of 2 executor(s) ran, nothing "
        "was compared with two: tpu-interpret: stopped by the kernel's deadlock")
    # an interpreter's own failure says nothing of the kernel: incomplete
    broken = Finding("interpret-error", "error", "XlaRuntimeError: INTERNAL: something")
    failed = dataclasses.replace(stopped, error=broken.message, findings=(broken,))
    assert dataclasses.replace(dead, results=(c.result("interpret"), failed)).outcome == \
        "incomplete"


# --- precision: an error far beyond the output dtype's rounding is a warning ---------------


def _bf16_matmuls():
    """(reference, bf16-accumulated, f32-accumulated) x @ y, K = 1024 in 8 blocks of 128."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1024)).astype(jnp.bfloat16).astype(np.float32)
    y = rng.standard_normal((1024, 128)).astype(jnp.bfloat16).astype(np.float32)
    parts = [x[:, k:k + 128] @ y[k:k + 128] for k in range(0, 1024, 128)]
    low = np.zeros((64, 128), jnp.bfloat16)
    for part in parts:
        low = (low.astype(np.float32) + part.astype(jnp.bfloat16).astype(np.float32)
               ).astype(jnp.bfloat16)
    high = np.sum(parts, axis=0, dtype=np.float32)
    return (x @ y).astype(jnp.bfloat16), low, high.astype(jnp.bfloat16)


def test_an_error_far_beyond_bf16_rounding_is_a_warning_not_a_failure():
    ref, low, high = _bf16_matmuls()
    bad = compare_arrays(low, ref, "kernel", "reference")
    assert bad.allclose  # within bf16's default tolerance: the bug passes
    assert bad.rounding_note is not None and re.fullmatch(
        r"\d+\.\d% of the elements differ by more than 4 ULP of bfloat16 \(up to \d+ ULP, at "
        r"each element's magnitude\), far beyond rounding to bfloat16: a kernel computing in "
        r"float32 and rounding once stays within 1 ULP\. Is something accumulated or computed "
        r"in bfloat16\? \(within the tolerance: not a failure\)", bad.rounding_note)
    assert compare_arrays(high, ref).rounding_note is None
    # float32 outputs compute at their own precision: many ULPs are the algorithm's, no note
    exact = np.linspace(1, 2, 4096, dtype=np.float32)
    noisy = exact * (1 + np.float32(1e-6) * np.sin(np.arange(4096, dtype=np.float32)))
    assert compare_arrays(noisy, exact).rounding_note is None


# --- statistics: NaN counts, max rel away from zero, ULP of integers -----------------------


def test_nan_counts_and_a_nan_mismatch_is_an_infinite_error_everywhere():
    nan = compare_arrays(np.full(4, np.nan, np.float32), np.array([np.nan, np.nan, 1, 2],
                                                                   np.float32))
    assert (nan.nan_a, nan.nan_b, nan.mismatched_elements) == (4, 2, 4)
    assert nan.max_abs_err == nan.max_rel_err == np.inf  # NaN vs NaN too: no "max rel 0"
    assert nan.max_ulp == np.iinfo(np.int32).max
    payload = nan.to_json()
    assert (payload["max_abs_err"], payload["max_rel_err"], payload["nan_a"],
            payload["nan_b"]) == (None, None, 4, 2)


def test_max_rel_leaves_out_reference_elements_within_atol_of_zero():
    denormal = np.float32(1e-40)
    pair = compare_arrays(np.array([100.0, 2e-40], np.float32),
                          np.array([100.0, denormal], np.float32))
    assert pair.allclose and pair.max_rel_err == 0.0  # was 1.0 (and 1e+302 with a 0 on a)
    judged = compare_arrays(np.array([101.0, 0.0], np.float32), np.array([100.0, 1e-40],
                                                                          np.float32))
    assert judged.max_rel_err == pytest.approx(0.01)


def _flat(case):
    fn, args = case[:2]
    return (fn, *args)

"""Comparison verdicts of issue 24 (compare / run / the magic): compare never contradicts
check, an integer result equal to the fill is not "unwritten", references that do not trace
run as written, and a leaked tracer or a lone executor with --reference is said as it is."""

import json

import pytest

import pallaslab
from pallaslab.cli import main

K = "tests/kernels_compare_verdicts.py"

pytestmark = pytest.mark.filterwarnings("error::UserWarning:pallaslab")


def _cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compare_counts_check_errors_a_parallel_write_conflict_on_tpu(capsys):
    code, out, _ = _cli(capsys, "compare", f"{K}:parallel_one_block", "--executors",
                        "vectorized,interpret", "--reference", f"{K}:ones_reference", "--json")
    payload = json.loads(out)
    assert code == 1, payload["verdict"]
    assert payload["verdict"] == ("all close, but static analysis found errors: "
                                  "parallel-write-conflict")
    assert payload["allclose"] and not payload["passed"]
    assert any(n.startswith("parallel-write-conflict (static analysis, as `pallaslab check`)")
               for n in payload["notes"])
    # the same finding check reports, from the same function
    code, out, _ = _cli(capsys, "check", f"{K}:parallel_one_block", "--json")
    check = json.loads(out)
    assert code == 1
    assert {p["code"] for k in check["kernels"] for p in k["problems"]} == {
        s["code"] for s in payload["static_findings"]}


def test_integers_equal_to_the_fill_are_written_values():
    from tests.kernels_compare_verdicts import int8_twice, twice_reference

    fn, args = int8_twice()
    c = pallaslab.compare(fn, *args, executors="vectorized,interpret",
                          reference=twice_reference)
    assert (int(args[0][0, 0]) * 2 + 128) % 256 - 128 == -128  # the fill is a result here
    assert c.verdict() == "all close" and c.passed
    assert not [f for f in c.findings if f.code == "unwritten-output"]


def test_integers_no_program_wrote_are_still_unwritten():
    from tests.kernels_compare_verdicts import int8_skip_odd

    fn, args = int8_skip_odd()
    c = pallaslab.compare(fn, *args, executors="vectorized,interpret")
    (found, _) = [f for f in c.findings if f.code == "unwritten-output"]
    assert found.severity == "error"
    assert " of 8,192 element(s) were written by no program under vectorized" in found.message
    assert found.blocks == ((1, 0), (3, 0), (5, 0), (7, 0))
    assert c.verdict() == "all close, but the runs found errors: unwritten-output"


def test_one_executor_with_a_reference_is_a_comparison(capsys):
    code, out, _ = _cli(capsys, "compare", f"{K}:double", "--executors", "vectorized",
                        "--reference", f"{K}:python_reference", "--json")
    payload = json.loads(out)
    assert code == 0, payload
    assert payload["executors"] == ["vectorized", "reference"]
    code, _, err = _cli(capsys, "compare", f"{K}:double", "--executors", "vectorized")
    assert code == 2
    assert "a comparison needs at least two executors; got 1 (vectorized)" in err
    assert "or give --reference FILE.py:FUNC" in err


def test_a_reference_that_does_not_trace_runs_as_written():
    from tests.kernels_compare_verdicts import double, python_reference

    fn, args = double()
    c = pallaslab.compare(fn, *args, executors="vectorized", reference=python_reference)
    assert c.passed, c.verdict()
    assert ("the reference python_reference ran as written, not under jax.jit: tracing it "
            "failed (ConcretizationTypeError: it reads array values in Python)") in c.notes


def test_a_reference_returning_a_leaked_tracer_says_so():
    from tests.kernels_compare_verdicts import double, leaky_reference

    fn, args = double()
    c = pallaslab.compare(fn, *args, executors="vectorized", reference=leaky_reference)
    assert c.outcome == "incomplete"
    reason = c.statuses["reference"].reason
    assert reason is not None and reason.startswith(
        "the reference leaky_reference returned a JAX tracer as ")
    assert "escaped from a transformation" in reason
    assert "compiled for" not in reason

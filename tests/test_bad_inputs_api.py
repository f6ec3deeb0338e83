"""The bad-input catalog for the Python API and the `%%pallas` magic (the CLI's is in
test_cli_bad_inputs.py): every entry asserts the message a user sees, and that nothing hangs,
passes falsely or shows an internal traceback where a message belongs."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from cases import bad_kernels as bk
from helpers import failing_on_hang

import pallaslab
from pallaslab.errors import (
    IndexMapError,
    KernelSelectionError,
    NoKernelError,
    PallasLabError,
    X64Error,
)
from pallaslab.execute import ExecutorError

X = bk.x()
SPIN_TIMEOUT = 8  # seconds: the spinning program is stopped by this limit


def _double(x):
    return x * 2


# -- errors raised before anything runs: (id, call, exception type, message pattern) ----------

RAISES: list[tuple[str, Callable[[], Any], type[BaseException], str]] = [
    ("compare-one-executor", lambda: pallaslab.compare(bk.copy, X, executors="interpret"),
     ExecutorError, r"needs at least two executors; got 1 \(interpret\)"),
    ("compare-no-executor", lambda: pallaslab.compare(bk.copy, X, executors=""),
     ExecutorError, r"needs at least two executors; got 0 \(none\)"),
    ("compare-executor-twice",
     lambda: pallaslab.compare(bk.copy, X, executors=["interpret", "interpret"]),
     ExecutorError, r"executor 'interpret' is listed twice"),
    ("compare-unknown-executor",
     lambda: pallaslab.compare(bk.copy, X, executors="interpret,bogus"),
     ExecutorError, r"unknown executor 'bogus'; the executors are: interpret, tpu-interpret"),
    ("compare-reference-missing",
     lambda: pallaslab.compare(bk.copy, X, executors="interpret,reference"),
     ExecutorError, r"reference executor needs a reference function: pass reference=my_ref"),
    ("compare-negative-rtol",
     lambda: pallaslab.compare(bk.copy, X, executors="interpret,tpu-interpret", rtol=-1),
     ExecutorError, r"rtol=-1: a tolerance is a finite number >= 0"),
    ("compare-nan-atol",
     lambda: pallaslab.compare(bk.copy, X, executors="interpret,tpu-interpret", atol=math.nan),
     ExecutorError, r"atol=nan: a tolerance is a finite number >= 0"),
    ("compare-zero-timeout",
     lambda: pallaslab.compare(bk.copy, X, executors="interpret,tpu-interpret", timeout=0),
     PallasLabError, r"timeout=0: a time limit is a positive number of seconds"),
    ("compare-text-timeout",
     lambda: pallaslab.compare(bk.copy, X, executors="interpret,tpu-interpret", timeout="5"),
     PallasLabError, r"timeout='5': a time limit is a positive number of seconds"),
    ("run-unknown-executor", lambda: pallaslab.run(bk.copy, X, executor="interp"),
     ExecutorError, r"unknown executor 'interp'; the executors are"),
    ("run-negative-timeout", lambda: pallaslab.run(bk.copy, X, timeout=-1),
     PallasLabError, r"timeout=-1: a time limit is a positive number of seconds"),
    ("capture-no-kernel", lambda: pallaslab.capture(bk.no_kernel, X),
     NoKernelError, r"no_kernel\(\.\.\.\) launched no Pallas kernel"),
    ("capture-index-map-parameters", lambda: pallaslab.capture(bk.index_map_takes_two, X),
     IndexMapError, r"args\[0\]: the index map <lambda> \(bad_kernels\.py:\d+\) takes 2 "
                    r"parameter\(s\), but Pallas calls it with 1: one per grid dimension "
                    r"\(grid \(4,\)\) plus one per scalar-prefetch operand \(0\)"),
    ("capture-index-map-floats", lambda: pallaslab.capture(bk.index_map_returns_floats, X),
     IndexMapError, r"args\[0\]: the index map .* returns a non-integer block index"),
    ("capture-float64-without-x64", lambda: pallaslab.capture(bk.writes_float64, X),
     X64Error, r"a kernel uses float64, but JAX's 64-bit types are off \(jax_enable_x64 is "
               r"False\).*jax\.config\.update\('jax_enable_x64', True\)"),
    ("capture-negative-grid", lambda: pallaslab.capture(bk.negative_grid, X),
     PallasLabError, r"grid \(-2,\) has a negative size \(dimension 0 is -2\)"),
    ("lower-target-none", lambda: pallaslab.lower(pallaslab.capture(bk.copy, X), target=None),
     PallasLabError, r"target=None: a target is one of tpu-v4, tpu-v5e"),
    ("lower-unknown-target",
     lambda: pallaslab.lower(pallaslab.capture(bk.copy, X), target="tpu-v9"),
     PallasLabError, r"unknown target 'tpu-v9'; known targets: tpu-v4"),
    ("inspect-unknown-kernel-name",
     lambda: pallaslab.Workbench(pallaslab.capture(bk.copy, X), kernel="nope"),
     (KernelSelectionError, PallasLabError), r"nope"),  # type: ignore[list-item]
    ("step-outside-the-grid", lambda: pallaslab.step(bk.copy, X).goto(9),
     (IndexError, PallasLabError), r"outside the grid \(4,\)"),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("name", "call", "kind", "pattern"), RAISES, ids=[r[0] for r in RAISES])
def test_bad_api_input_is_a_clear_error(name, call, kind, pattern):
    with pytest.raises(kind) as info:
        call()
    assert re.search(pattern, str(info.value)), str(info.value)
    assert "Traceback" not in str(info.value)


def test_a_users_own_bug_while_tracing_surfaces_unwrapped():
    with pytest.raises(NameError, match="undefined_name") as info:
        pallaslab.capture(bk.user_bug_while_tracing, X)
    assert info.traceback[-1].path.name == "bad_kernels.py"


# -- honest verdicts: comparisons that must not pass ------------------------------------------


def verdict(comparison) -> tuple[bool, bool, str]:
    return comparison.complete, comparison.passed, comparison.verdict()


def test_an_unavailable_executor_makes_the_comparison_incomplete():
    c = pallaslab.compare(bk.copy, X, executors="interpret,device")
    assert verdict(c)[:2] == (False, False) and c.allclose is False
    assert c.statuses["interpret"].status == "ran"
    assert c.statuses["device"].status == "unavailable"
    assert c.statuses["device"].reason.startswith("no TPU or GPU is attached")
    assert c.verdict().startswith("INCOMPLETE: only 1 of 2 executor(s) ran")
    assert c.to_json()["complete"] is False
    assert c.to_json()["executors_status"]["device"]["status"] == "unavailable"


@pytest.mark.parametrize(("reference", "pattern"), [
    (lambda x: (x, x), r"the reference <lambda> returned 2 array\(s\), but the kernel "
                       r"function returns 1"),
    (lambda x: x[:8], r"the reference <lambda> returned f32\[8,128\] for outputs; the kernel "
                      r"returns f32\[32,128\]"),
    (lambda x: x.astype(jnp.bfloat16), r"returned bf16\[32,128\] for outputs; the kernel "
                                       r"returns f32\[32,128\]\. Cast the reference's output"),
    (lambda x: x / 0 + undefined_name,  # noqa: F821
     r"the reference <lambda> raised NameError: name 'undefined_name' is not defined"),
], ids=["count", "shape", "dtype", "raises"])
def test_a_reference_that_does_not_fit_fails_alone_and_is_named(reference, pattern):
    c = pallaslab.compare(bk.copy, X, executors="interpret,tpu-interpret,reference",
                          reference=reference)
    status = c.statuses["reference"]
    assert status.status == "failed" and re.search(pattern, status.reason), status.reason
    # The other two still ran and were compared, but the check asked for was not made.
    assert c.ran == ("interpret", "tpu-interpret") and c.outcome == "incomplete"
    assert not c.passed and c.verdict().startswith("INCOMPLETE: reference did not run")


def test_unwritten_output_never_passes_even_against_a_matching_reference():
    # The reference returns NaN where the kernel writes nothing: NaN never equals NaN.
    def reference(x):
        rows = jnp.arange(x.shape[0])[:, None] // bk.ROWS
        return jnp.where(rows % 2 == 0, x + 1, jnp.nan)

    c = pallaslab.compare(bk.skips_odd_programs, X, executors="interpret,reference",
                          reference=reference)
    assert verdict(c)[:2] == (True, False) and c.allclose is False
    (pair,) = c.outputs[0].pairs
    assert pair.mismatched_elements == 2 * bk.ROWS * 128
    (finding,) = [f for f in c.findings if f.code == "unwritten-output"]
    # NaN may also be computed by the kernel: a warning; the comparison fails all the same.
    assert finding.severity == "warning" and finding.operand == "outputs"
    assert finding.blocks == ((1, 0), (3, 0)) and finding.programs == ((1,), (3,))
    assert ("outputs: 2,048 of 4,096 element(s) hold NaN after the run under interpret: no "
            "program wrote them (they keep the fill for uninitialised memory, NaN), or the "
            "values written were NaN") in finding.message
    same = pallaslab.compare(bk.skips_odd_programs, X, executors="interpret,reference",
                             reference=reference, equal_nan=True)
    assert same.allclose  # asked for: NaN == NaN; the warning stays in its findings
    assert any(f.code == "unwritten-output" for f in same.findings)


def test_unwritten_integer_output_is_found_and_the_interpreters_disagree():
    c = pallaslab.compare(bk.skips_odd_programs_int, X, executors="interpret,tpu-interpret")
    assert c.complete and not c.allclose and not c.passed
    # interpret leaves the fill; tpu-interpret writes back whatever the reused VMEM block held
    # (the previous program's values), as a TPU would.
    (finding,) = [f for f in c.result("interpret").findings if f.code == "unwritten-output"]
    assert finding.severity == "error"
    assert ("2,048 of 4,096 element(s) were written by no program under interpret: they still "
            "hold its fill for uninitialised memory, -2,147,483,648 in block(s) (1, 0), (3, 0)"
            ) in finding.message
    assert c.outputs[0].pairs[0].mismatched_blocks == ((1, 0), (3, 0))


def test_nan_equals_nan_only_when_asked():
    c = pallaslab.compare(bk.makes_nan, X, executors="interpret,tpu-interpret")
    assert c.complete and not c.allclose
    assert c.outputs[0].pairs[0].mismatched_elements == X.size
    assert pallaslab.compare(bk.makes_nan, X, executors="interpret,tpu-interpret",
                             equal_nan=True).allclose


@pytest.mark.parametrize("executor", ["interpret", "tpu-interpret"])
def test_a_failed_debug_check_is_a_finding_with_its_program(executor):
    x = X.at[17, 3].set(1000.0)  # row 17: block 2
    result = pallaslab.run(bk.fails_debug_check, x, executor=executor)
    assert result.status == "ran"
    (finding,) = [f for f in result.findings if f.code == "debug-check-failed"]
    assert finding.severity == "error" and finding.programs == ((2,),)
    assert ("_check_kernel: pl.debug_check failed 1 time(s), first in program(s) (2,): "
            "values must stay below 100") in finding.message
    clean = pallaslab.run(bk.fails_debug_check, X, executor=executor)
    assert not [f for f in clean.findings if f.code == "debug-check-failed"]


@pytest.fixture
def hang_guard():
    """A hang fails the test (with every thread's stack) instead of stalling the suite."""
    with failing_on_hang(240):
        yield


def test_the_worker_takes_module_functions():
    # Everything below relies on it: an in-process run could not stop a spinning program.
    result = pallaslab.run(bk.copy, X)
    assert result.status == "ran", result.reason
    assert not any("in-process" in n or "in this process" in n for n in result.notes), \
        result.notes


NOTEBOOK_CELL = """
import jax
from jax.experimental import pallas as pl

def copy_block(x_ref, o_ref):
    o_ref[...] = x_ref[...]

copy = pl.pallas_call(copy_block, grid=(2,),
                      in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                      out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                      out_shape=jax.ShapeDtypeStruct((16, 128), jax.numpy.float32))
"""


def test_a_pallas_call_object_made_in_a_notebook_runs_in_the_worker():
    """`copy = pl.pallas_call(...)` in a notebook is one of JAX's closures, sent by value:
    the primitive it binds must stay JAX's own `pallas_call` in the worker."""
    ns = {"__name__": "__main__"}  # as a notebook cell's names: not importable, sent by value
    exec(NOTEBOOK_CELL, ns)
    result = pallaslab.run(ns["copy"], np.ones((16, 128), np.float32))
    assert result.status == "ran", result.reason
    np.testing.assert_array_equal(result.outputs[0], 1.0)


def test_a_spinning_program_is_stopped_by_the_time_limit_and_named(hang_guard):
    c = pallaslab.compare(bk.spins_in_program_1, X, executors="interpret,reference",
                          reference=lambda x: x, timeout=SPIN_TIMEOUT)
    status = c.statuses["interpret"]
    assert status.status == "timed-out" and not c.complete and not c.passed
    assert re.search(rf"interpret stopped by its time limit of {SPIN_TIMEOUT} s, while running "
                     r"program \(1,\) of _spin_kernel \(2 program\(s\) started\)", status.reason)
    # The process is fine afterwards: the next run works (in a fresh worker).
    assert pallaslab.compare(bk.copy, X, executors="interpret,tpu-interpret").passed


def test_run_reports_a_time_out_as_a_status(hang_guard):
    result = pallaslab.run(bk.spins_in_program_1, X, timeout=SPIN_TIMEOUT)
    assert result.status == "timed-out" and result.outputs is None
    assert "program (1,)" in result.timed_out


def test_an_unpicklable_function_runs_here_and_says_so():
    import threading

    lock = threading.Lock()  # cannot be pickled: the function stays in this process

    def holds_a_lock(x):
        with lock:
            return bk.copy(x)

    result = pallaslab.run(holds_a_lock, X)
    assert result.status == "ran"
    assert any("ran in the notebook's process" in n for n in result.notes), result.notes
    np.testing.assert_array_equal(result.outputs[0], np.asarray(X))


def test_empty_grid_has_an_empty_analysis_not_a_traceback():
    wb = pallaslab.inspect(bk.empty_grid, X)
    codes = {f.code for f in wb.findings}
    assert "empty-grid" in codes


def test_one_dimensional_goto_takes_an_int():
    st = pallaslab.step(bk.copy, X)
    assert st.goto(1) == (1,)
    assert st.goto((3,)) == (3,)


@pytest.mark.serial  # Ctrl-C is SIGINT to this process: an xdist worker ignores it
def test_ctrl_c_stops_a_spinning_run_and_names_what_was_running():
    import faulthandler
    import os
    import signal
    import threading

    faulthandler.dump_traceback_later(240, exit=True)  # a hang fails the test, not the suite
    timer = threading.Timer(6.0, os.kill, (os.getpid(), signal.SIGINT))
    # A shell that started the suite in the background leaves SIGINT ignored: Ctrl-C as a
    # terminal delivers it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt) as info:
            pallaslab.compare(bk.spins_in_program_1, X, executors="interpret,reference",
                              reference=lambda x: x, timeout=200)
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGINT, previous)
    assert re.search(r"interpret run interrupted after [\d.]+ s, while running program \(1,\) "
                     r"of _spin_kernel", str(info.value)), str(info.value)
    assert pallaslab.run(bk.copy, X).status == "ran"  # and the process goes on


def test_cli_equal_nan(capsys):
    from pallaslab.cli import main

    case = "tests/cases/bad_kernels.py"
    assert main(["compare", f"{case}:nan_case", "--executors", "interpret,tpu-interpret"]) == 1
    assert main(["compare", f"{case}:nan_case", "--executors", "interpret,tpu-interpret",
                 "--equal-nan"]) == 0
    capsys.readouterr()


def test_no_text_progress_bar_is_written_to_a_log(monkeypatch):
    import io

    from pallaslab.execute.worker import monitor

    monkeypatch.setattr(sys, "__stderr__", io.StringIO())  # redirected: not a terminal
    assert monitor._progress_bar(100, "interpret") is None


def test_an_unknown_chip_to_trace_under_is_an_error_even_when_tracing_does_not_ask():
    with pytest.raises(ValueError, match=r"unknown TPU chip 'v9' to trace under: known chips "
                                         r"are v4, v5e, v5p, v6e, 7x"):
        pallaslab.capture(bk.copy, X, chip="v9")


def test_targets_are_named_in_any_case_as_on_the_command_line():
    from pallaslab.lowering.targets import get_target

    assert get_target("TPU-V5E").name == "tpu-v5e" and get_target(" H100 ").name == "gpu-h100"


def test_the_workbenchs_compare_runs_the_users_call_in_the_worker(hang_guard):
    """`pallaslab.inspect(fn, x)` keeps the user's call, so its Compare view runs there too
    (the captured trace cannot travel): a spinning program is stopped at the time limit."""
    from pallaslab.views.compare import attach_comparison

    wb = pallaslab.inspect(bk.spins_in_program_1, X)
    assert wb.session.call[0] is bk.spins_in_program_1
    c = attach_comparison(wb, executors="interpret,reference", reference=lambda x: x,
                          timeout=SPIN_TIMEOUT)
    assert c.statuses["interpret"].status == "timed-out" and not c.passed

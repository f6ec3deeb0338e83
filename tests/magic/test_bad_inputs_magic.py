"""The bad-input catalog for `%%pallas`, through a real IPython InteractiveShell: a bad flag is
a one-line UsageError, a syntax error fails the cell as in a plain cell, the user's own errors
surface as theirs, nothing hangs, and the notebook's namespace is left as it was."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from helpers import user_names
from IPython.core.error import UsageError
from ipython_shell import ipython_shell, run

SETUP = """
from cases import bad_kernels as bk
x = bk.x()
def same(x):
    return x
"""


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


USAGE = [
    ("unknown-flag", "%%pallas --nope\nbk.copy(x)", r"unrecognized arguments: --nope"),
    ("compare-one", "%%pallas --compare interpret\nbk.copy(x)", r"at least two executors"),
    ("compare-unknown", "%%pallas --compare interpret,bogus\nbk.copy(x)",
     r"unknown executor 'bogus' in --compare"),
    ("compare-reference-missing", "%%pallas --compare interpret,reference=nowhere\nbk.copy(x)",
     r"reference=nowhere: no such name in the notebook"),
    ("compare-reference-not-callable", "%%pallas --compare interpret,reference=x\nbk.copy(x)",
     r"reference=x is not callable"),
    ("compare-reference-empty", "%%pallas --compare interpret,reference=\nbk.copy(x)",
     r"needs the reference function"),
    ("timeout-negative", "%%pallas --compare interpret,tpu-interpret --timeout -3\nbk.copy(x)",
     r"--timeout -3: a time limit is a positive number of seconds"),
    ("timeout-text", "%%pallas --compare interpret,tpu-interpret --timeout soon\nbk.copy(x)",
     r"--timeout soon: a time limit is a positive number of seconds"),
    ("target-unknown", "%%pallas --target tpu-v9\nbk.copy(x)", r"unknown --target 'tpu-v9'"),
    ("chip-unknown", "%%pallas --chip v99\nbk.copy(x)", r"v99"),
    ("tab-unknown", "%%pallas --tab nope\nbk.copy(x)", r"nope"),
    ("empty-cell", "%%pallas\n", r"empty"),
    ("no-kernel", "%%pallas\nbk.no_kernel(x)", r"launched no Pallas kernel"),
    ("index-map-parameters", "%%pallas\nbk.index_map_takes_two(x)",
     r"takes 2 parameter\(s\), but Pallas calls it with 1"),
    ("negative-grid", "%%pallas\nbk.negative_grid(x)", r"grid \(-2,\) has a negative size"),
]


@pytest.mark.parametrize(("name", "cell", "pattern"), USAGE, ids=[u[0] for u in USAGE])
def test_bad_magic_input_is_a_one_line_usage_error(shell, name, cell, pattern):
    import re

    before = user_names(shell)
    result, _ = run(shell, cell)
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    message = str(result.error_in_exec)
    assert re.search(pattern, message), message
    assert "\n" not in message.strip() and "Traceback" not in message
    assert user_names(shell) == before


def test_a_syntax_error_fails_the_cell_as_a_plain_cell_does(shell):
    before = user_names(shell)
    result, _ = run(shell, "%%pallas\ny = (\nbk.copy(x)")
    assert not result.success and isinstance(result.error_in_exec, SyntaxError)
    assert "was never closed" in str(result.error_in_exec)
    assert user_names(shell) == before


def test_the_users_own_error_is_theirs_and_the_namespace_is_kept(shell):
    before = user_names(shell)
    result, _ = run(shell, "%%pallas\nz = 1 / 0\nbk.copy(x)")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert user_names(shell) == before
    result, _ = run(shell, "%%pallas\nbk.user_bug_while_tracing(x)")
    assert isinstance(result.error_in_exec, NameError)


def test_a_spinning_kernel_under_compare_is_stopped_and_the_notebook_goes_on(shell):
    import faulthandler

    faulthandler.dump_traceback_later(240, exit=True)  # a hang fails, not stalls, the suite
    try:
        _spinning_compare(shell)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _spinning_compare(shell):
    before = user_names(shell)
    result, out = run(shell, "%%pallas --compare interpret,reference=same --timeout 8\n"
                             "value = bk.spins_in_program_1(x)")
    # The workbench is shown with the honest comparison, then the cell fails: the value would
    # need the run that the time limit stopped (the plain cell would never finish).
    text = "\n".join(o.data.get("text/plain", "") for o in out.outputs)
    assert "interpret: timed-out" in text and "program (1,)" in text, text
    assert isinstance(result.error_in_exec, TimeoutError), result.error_in_exec
    assert user_names(shell) == before
    follow, _ = run(shell, "%%pallas\nbk.copy(x)")
    assert follow.success, follow.error_in_exec

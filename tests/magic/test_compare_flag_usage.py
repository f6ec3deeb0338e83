"""`%%pallas --compare` with no value: a one-line UsageError that shows a value to write."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from IPython.core.error import UsageError
from ipython_shell import ipython_shell, run

SETUP = """
from cases import bad_kernels as bk
x = bk.x()
"""


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


@pytest.mark.parametrize("line", ["%%pallas --compare", "%%pallas --tab compare --compare"])
def test_bare_compare_shows_an_example(shell, line):
    result, _ = run(shell, f"{line}\nbk.copy(x)")
    err = result.error_in_exec
    assert isinstance(err, UsageError), err
    text = str(err)
    assert "--compare interpret,reference" in text, text
    assert "\n" not in text


def test_other_missing_values_still_name_the_flag(shell):
    result, _ = run(shell, "%%pallas --timeout\nbk.copy(x)")
    err = result.error_in_exec
    assert isinstance(err, UsageError), err
    assert "--timeout" in str(err)

"""`%%pallas --exercise NAME [--hint]`: the cell's function checked, in a real IPython shell."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from IPython.core.error import UsageError
from ipython_shell import ipython_shell, run

from pallaslab.exercises import ExerciseResult

SETUP = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
"""

ADD_2D = """%%pallas --exercise add-2d
def add_2d(x, y):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    y_spec = pl.BlockSpec((8, 128), lambda i, j: ({y_map}))
    return pl.pallas_call(kernel, grid=(2, 2), in_specs=[spec, y_spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)
"""


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


def test_a_correct_cell_gets_the_verdict_correct(shell):
    result, out = run(shell, ADD_2D.format(y_map="i, j"))
    assert result.success, result.error_in_exec
    assert isinstance(result.result, ExerciseResult)
    assert result.result.verdict == "correct"
    assert "add-2d: ✅ correct" in out.stdout


def test_a_transposed_index_map_is_diagnosed_in_the_learners_words(shell):
    result, out = run(shell, ADD_2D.format(y_map="j, i"))
    assert result.result.verdict == "wrong"
    assert "your y_ref index map looks transposed" in out.stdout
    assert "hint:" not in out.stdout


def test_hint_on_request(shell):
    _, out = run(shell, ADD_2D.format(y_map="j, i").replace("add-2d", "add-2d --hint"))
    assert "hint: Program (i, j) needs block (i, j)" in out.stdout


def test_hint_alone_needs_no_code(shell):
    result, out = run(shell, "%%pallas --exercise add-2d --hint\n# not yet\n")
    assert result.success
    assert "hint: Program (i, j) needs block (i, j)" in out.stdout


def test_unknown_exercise_is_a_one_line_usage_error_naming_the_exercises(shell):
    result, _ = run(shell, "%%pallas --exercise add-vector\ndef add_vectors(x, y): ...\n")
    err = result.error_in_exec
    assert isinstance(err, UsageError)
    assert str(err).startswith("%%pallas: --exercise: no exercise 'add-vector': the exercises "
                               "are add-vectors, scale-2d, add-2d, row-bias, ")
    assert "\n" not in str(err)


def test_a_cell_without_the_function_names_the_signature(shell):
    result, _ = run(shell, "%%pallas --exercise scale-2d\nz = 1\n")
    err = result.error_in_exec
    assert isinstance(err, UsageError)
    assert str(err) == ("%%pallas: --exercise scale-2d: the cell must define `scale_2d(x)` (no "
                        "function 'scale_2d' in the notebook)")


def test_magic_help_documents_the_exercise_flags(shell):
    doc = shell.find_cell_magic("pallas").__doc__
    assert "--exercise NAME" in doc and "--hint" in doc

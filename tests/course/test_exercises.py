"""Every exercise of the course: its solution passes, and each typical wrong answer gets its
targeted diagnosis (the text a learner reads)."""

from __future__ import annotations

import jax
import pytest
from jax.experimental import pallas as pl

from pallaslab.exercises import UnknownExercise, check, exercise, exercises, names
from pallaslab.exercises.solutions import SOLUTIONS, WRONG

WRONG_CASES = [(name, fn, phrase) for name, wrongs in WRONG.items() for fn, phrase in wrongs]


def test_every_exercise_has_a_solution_and_a_typical_wrong_answer():
    assert set(SOLUTIONS) == set(names())
    assert {n for n, _, _ in WRONG_CASES} == set(names())
    assert len({ex.notebook for ex in exercises().values()}) >= 3


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name):
    result = check(name, SOLUTIONS[name])
    assert result.verdict == "correct", result.text()
    assert result.diagnosis == ()


@pytest.mark.parametrize(("name", "fn", "phrase"), WRONG_CASES,
                         ids=[f"{n}-{f.__name__}" for n, f, _ in WRONG_CASES])
def test_wrong_answer_gets_its_diagnosis(name, fn, phrase):
    result = check(name, fn)
    assert result.verdict == "wrong", result.text()
    assert any(phrase in line for line in result.diagnosis), result.text()


def test_hints_only_on_request():
    assert check("add-2d", SOLUTIONS["add-2d"]).hints == ()
    hinted = check("add-2d", SOLUTIONS["add-2d"], hint=True)
    assert hinted.hints == exercise("add-2d").hints
    assert "hint: Program (i, j) needs block (i, j)" in hinted.text()


def test_unknown_exercise_names_the_known_ones():
    with pytest.raises(UnknownExercise) as err:
        exercise("add-vector")
    assert str(err.value).startswith("no exercise 'add-vector': the exercises are add-vectors, ")


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = 2 * x_ref[...] + 1


def scale_2d_narrow_blocks(x):
    """Correct values, but (8, 64) f32 blocks: a TPU wants the last block dim a multiple of
    128."""
    spec = pl.BlockSpec((8, 64), lambda i, j: (i, j))
    return pl.pallas_call(_copy_kernel, grid=(2, 4), in_specs=[spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


def test_correct_kernel_a_tpu_would_reject_gets_a_note_not_a_failure():
    result = check("scale-2d", scale_2d_narrow_blocks)
    assert result.verdict == "correct", result.text()
    assert result.notes and "on a TPU" in result.notes[0], result.text()


def learner_error(x):
    raise ValueError("my kernel is not written yet")


def test_code_that_fails_is_an_error_not_a_pass():
    result = check("scale-2d", learner_error)
    assert result.verdict == "error"
    assert result.diagnosis == ("ValueError: my kernel is not written yet",)


def scale_2d(x):
    ...


def test_the_stub_as_given_is_told_to_launch_a_kernel():
    result = check("scale-2d", scale_2d)
    assert result.verdict == "error"
    assert result.diagnosis == ("your function launched no Pallas kernel: it must call "
                                "`pl.pallas_call(...)` and return its result",)


def test_a_known_mistake_is_named_only_for_the_output_it_computes():
    from pallaslab.exercises.solutions import dmas

    other_wrong = check("emit-pipeline", dmas.pipelined_add_half_grid)
    assert other_wrong.verdict == "wrong"
    assert not any("transposed" in line for line in other_wrong.diagnosis), other_wrong.text()
    assert check("emit-pipeline", SOLUTIONS["emit-pipeline"]).diagnosis == ()

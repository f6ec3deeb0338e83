"""The Pallas course's exercises, checked by pallaslab (notebooks/course/).

`check(NAME, fn)` runs a learner's kernel against the exercise's hidden reference with
pallaslab's findings and causes, and answers with a verdict, the diagnosis in a learner's words
and, on request, hints; `%%pallas --exercise NAME [--hint]` is the same in a notebook.

- `exercise`: the `Exercise` and `ExerciseResult` dataclasses;
- `registry`: the exercises by name, from `topics` (one module per notebook);
- `checker`: `check`; `diagnose`: causes and findings in a learner's words;
- `solutions`: a solution and typical wrong answers per exercise (the tests run them).
"""

from pallaslab.exercises.checker import check
from pallaslab.exercises.exercise import Exercise, ExerciseResult
from pallaslab.exercises.registry import UnknownExercise, exercise, exercises, names

__all__ = ["Exercise", "ExerciseResult", "UnknownExercise", "check", "exercise", "exercises",
           "names"]

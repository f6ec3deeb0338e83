"""`%%pallas --exercise NAME [--hint]`: check the function the cell defines against the
course's exercise NAME (`pallaslab.exercises.check`), and show the verdict and diagnosis.

The cell runs in the notebook's namespace as a plain cell would; it must define the
exercise's function (`add_vectors` for "add_vectors(x, y)"). A cell with `--hint` and no such
function shows the hints only. A shell: the logic is in `pallaslab.exercises`.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from pallaslab.magic.user_code import run_code

# Flags of the magic's own parser, not `register_option`s: the views never see them.
EXERCISE_FLAGS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("--exercise",), {"default": None, "metavar": "NAME",
                       "help": "check the function this cell defines against the course's "
                               "exercise NAME (notebooks/course/): a verdict and a diagnosis"}),
    (("--hint",), {"action": "store_true", "help": "with --exercise: show the exercise's hints"}),
)


def add_exercise_flags(magic: Any) -> None:
    """Add `--exercise` and `--hint` to the `%%pallas` parser (and to `%%pallas?`)."""
    for flags, kwargs in EXERCISE_FLAGS:
        magic.parser.add_argument(*flags, **kwargs)
    magic.__doc__ = magic.parser.format_help()


def exercise_cell(shell: Any, cell: str, name: str, *, hint: bool = False) -> Any:
    """Run the cell, then check its function: the `ExerciseResult` is the cell's value."""
    from pallaslab.exercises import UnknownExercise, check, exercise

    try:
        ex = exercise(name)
    except UnknownExercise as err:
        raise UsageError(f"%%pallas: --exercise: {err}") from None
    source = shell.transform_cell(cell)
    filename = shell.compile.cache(source, shell.execution_count, raw_code=cell)
    run_code(compile(source, filename, "exec", flags=shell.compile.flags, dont_inherit=True),
             shell.user_ns)  # the cell's own error reads as in a plain cell
    fn = shell.user_ns.get(ex.function_name)
    if fn is None or not callable(fn):
        if hint:
            return "\n".join(f"hint: {h}" for h in ex.hints)
        raise UsageError(f"%%pallas: --exercise {ex.name}: the cell must define "
                         f"`{ex.signature}` (no function {ex.function_name!r} in the notebook)")
    return check(ex.name, fn, hint=hint)

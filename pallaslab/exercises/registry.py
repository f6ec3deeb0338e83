"""The course's exercises by name, gathered from the topic modules (one per notebook)."""

from __future__ import annotations

import functools

from pallaslab.errors import PallasLabError
from pallaslab.exercises.exercise import Exercise


class UnknownExercise(PallasLabError, KeyError):
    """A name that is no exercise of the course."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@functools.cache
def exercises() -> dict[str, Exercise]:
    """Every exercise by name, in the course's order (notebook 1 first)."""
    from pallaslab.exercises.topics import ALL_TOPICS

    found: dict[str, Exercise] = {}
    for topic in ALL_TOPICS:
        for ex in topic:
            if ex.name in found:
                raise ValueError(f"two exercises named {ex.name!r}")
            found[ex.name] = ex
    return found


def names() -> tuple[str, ...]:
    return tuple(exercises())


def exercise(name: str) -> Exercise:
    """The exercise called `name`; an unknown name lists the known ones."""
    found = exercises().get(name.strip())
    if found is None:
        raise UnknownExercise(f"no exercise {name!r}: the exercises are {', '.join(names())}")
    return found

"""The mutant catalog's registry: single-bug variants of correct kernels, each with the
diagnosis compare must give it.

A mutant module (`tests/mutants/<group>.py`) defines zero-argument cases returning
`(fn, args)` and registers each with `@mutant(...)`: the correct kernel it was made from, its
reference, the bug, and what must be said: a cause `kind` ("index-map", "line",
"first-visit") whose message holds every one of `words`, or `finding`: an error finding code
(a race, a deadlock) that catches the mutant without a mismatch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

Case = Callable[[], tuple[Any, ...]]


@dataclasses.dataclass(frozen=True)
class Mutant:
    case: Case
    original: str  # the correct kernel's case name (in ORIGINALS)
    bug: str  # the single bug, in words
    reference: Callable[..., Any]
    kind: str | None = None  # the cause kind it must get ...
    words: tuple[str, ...] = ()  # ... whose message holds these
    operand: str | None = None  # ... blaming this operand (its origin, as a prefix)
    finding: str | None = None  # or: the error finding code that catches it
    executors: tuple[str, ...] = ("vectorized", "reference")

    @property
    def name(self) -> str:
        return self.case.__name__


MUTANTS: dict[str, Mutant] = {}
# name -> (case, reference, executors)
ORIGINALS: dict[str, tuple[Case, Callable[..., Any], tuple[str, ...]]] = {}


def mutant(original: str, bug: str, reference: Callable[..., Any], *, kind: str | None = None,
           words: tuple[str, ...] = (), operand: str | None = None,
           finding: str | None = None,
           executors: tuple[str, ...] = ("vectorized", "reference")) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        MUTANTS[fn.__name__] = Mutant(fn, original, bug, reference, kind, words, operand,
                                      finding, executors)
        return fn

    return register


def original(reference: Callable[..., Any], executors: tuple[str, ...] = (
        "vectorized", "reference")) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        ORIGINALS[fn.__name__] = (fn, reference, executors)
        return fn

    return register


def line_of(module_file: str, text: str) -> str:
    """"module.py:N" of the first line of `module_file` holding `text` (edits move lines),
    other than the lines asking for it."""
    path = Path(module_file)
    lines = path.read_text().splitlines()
    found = next(n for n, line in enumerate(lines, 1)
                 if text in line and "line_of(" not in line)
    return f"{path.name}:{found}"


def caught_and_explained(mutant: Mutant, comparison: Any) -> tuple[bool, bool, str]:
    """(caught, explained, what was said): caught when compare did not pass; explained when
    the expected cause (or finding) is among what it named."""
    caught = comparison.outcome in ("mismatch", "errors")
    said = [c for o in comparison.outputs for c in o.causes]
    if mutant.finding is not None:
        codes = {f.code for f in comparison.findings if f.severity == "error"}
        return caught, mutant.finding in codes, ", ".join(sorted(codes)) or "no finding"
    good = [c for c in said if c.kind == mutant.kind
            and all(w in c.message for w in mutant.words)
            and (mutant.operand is None or (c.operand or "").startswith(mutant.operand))]
    text = " | ".join(f"{c.kind}: {c.message}" for c in said) or "no cause"
    return caught, bool(good), text

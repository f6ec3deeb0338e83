"""An exercise of the course (its reference hidden from the learner) and a check's result."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

Verdict = Literal["correct", "wrong", "error", "not-checked"]


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A typical wrong answer, known by what it computes: a learner's output that matches
    `computes(*inputs)` (and not the reference) made this mistake, and `says` tells them which.
    For mistakes the general causes cannot name (a reduction over the wrong axis, a ring that
    turns the wrong way, an index map inside `emit_pipeline`)."""

    computes: Callable[..., Any] = dataclasses.field(repr=False)
    says: str


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise: the learner writes `signature` (a function that launches a Pallas kernel);
    `check` runs it against `reference` (pure JAX, never shown) on `inputs()`."""

    name: str  # "add-vectors": what `%%pallas --exercise NAME` takes
    notebook: int  # 1..6: the course notebook it belongs to
    section: str  # the notebook's topic, e.g. "elementwise and 2-D grids"
    title: str
    signature: str  # "add_vectors(x, y)": the function the learner defines
    stub: str  # the code the learner starts from
    reference: Callable[..., Any] = dataclasses.field(repr=False)
    inputs: Callable[[], tuple[Any, ...]] = dataclasses.field(repr=False)
    hints: tuple[str, ...] = ()
    explanation: str = ""  # the notebook's text before the stub
    executors: tuple[str, ...] = ("vectorized", "reference")
    devices: int | None = None  # simulated CPU devices (a collective), run in a worker
    rtol: float | None = None
    atol: float | None = None
    mistakes: tuple[Mistake, ...] = ()

    def concrete_inputs(self, seed: int = 0) -> tuple[Any, ...]:
        """`inputs()` with each abstract argument filled with seeded random data (a view that
        evaluates scalar-prefetch index maps needs values)."""
        import jax
        import numpy as np

        rng = np.random.default_rng(seed)
        return tuple(rng.standard_normal(a.shape).astype(a.dtype)
                     if isinstance(a, jax.ShapeDtypeStruct) else a for a in self.inputs())

    @property
    def function_name(self) -> str:
        """`add_vectors` of "add_vectors(x, y)": the name the magic looks up in the cell."""
        return self.signature.split("(", 1)[0].strip()


@dataclasses.dataclass(frozen=True)
class ExerciseResult:
    """What `pallaslab.exercises.check` answers: the verdict, the diagnosis in a learner's
    words, notes that do not fail the exercise (e.g. a TPU would reject it), and the hints
    when asked for."""

    exercise: str
    verdict: Verdict
    diagnosis: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.verdict == "correct"

    def text(self) -> str:
        head = {"correct": "✅ correct", "wrong": "❌ not yet",
                "error": "❌ the kernel failed to run", "not-checked":
                "⚠️ not checked: the comparison could not be made"}[self.verdict]
        lines = [f"{self.exercise}: {head}"]
        lines += [f"  - {_one_line(d)}" for d in self.diagnosis]
        lines += [f"  note: {_one_line(n)}" for n in self.notes]
        lines += [f"  hint: {_one_line(h)}" for h in self.hints]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """A notebook's view: the verdict and a list of bullets the browser wraps at word
        boundaries (plain text in JupyterLab breaks lines inside words)."""
        import html
        import re

        def item(text: str) -> str:
            escaped = html.escape(" ".join(text.split()))
            return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)

        text = self.text().splitlines()[0]
        parts = [f"<div><strong>{html.escape(text)}</strong>"]
        for label, items in (("", self.diagnosis), ("note: ", self.notes),
                             ("hint: ", self.hints)):
            if items:
                parts.append("<ul>" + "".join(f"<li>{html.escape(label)}{item(i)}</li>"
                                              for i in items) + "</ul>")
        return "".join(parts) + "</div>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def __str__(self) -> str:
        return self.text()


def _one_line(text: str) -> str:
    return " ".join(text.split())

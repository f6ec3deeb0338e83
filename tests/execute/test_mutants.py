"""The mutant catalog (tests/mutants): every single-bug kernel is caught and its cause named;
the correct kernels they were made from pass with no cause."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mutants"))

import body_mutants  # noqa: F401  (each registers its mutants)
import dma_mutants  # noqa: F401
import gpu_mutants  # noqa: F401
import tpu_mutants  # noqa: F401
from mutant_registry import MUTANTS, ORIGINALS, caught_and_explained

import pallaslab

pytestmark = pytest.mark.slow  # one compare per mutant and original (a few seconds each)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught_and_explained(name):
    m = MUTANTS[name]
    fn, args = m.case()
    result = pallaslab.compare(fn, *args, executors=",".join(m.executors),
                               reference=m.reference)
    caught, explained, said = caught_and_explained(m, result)
    assert caught, f"{name} ({m.bug}) passed compare: {result.verdict()}"
    assert explained, f"{name} ({m.bug}): expected {m.kind or m.finding} {m.words}; got {said}"


@pytest.mark.parametrize("name", sorted(ORIGINALS))
def test_correct_original_gets_no_cause(name):
    case, reference, executors = ORIGINALS[name]
    fn, args = case()
    result = pallaslab.compare(fn, *args, executors=",".join(executors), reference=reference)
    assert result.outcome == "pass", result.verdict()
    assert all(not o.causes and o.provenance is None for o in result.outputs)
    assert result.cause_lines() == ()
    assert all(o["causes"] == [] for o in result.to_json()["outputs"])


def test_catalog_has_the_issue_s_bug_kinds():
    assert len(MUTANTS) >= 12
    assert {m.original for m in MUTANTS.values()} <= set(ORIGINALS)
    kinds = {m.kind for m in MUTANTS.values()} | {"finding" for m in MUTANTS.values()
                                                 if m.finding}
    assert {"index-map", "line", "first-visit", "finding"} <= kinds

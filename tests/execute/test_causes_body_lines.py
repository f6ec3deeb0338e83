"""The line a value bug is on: compare names the mask line above the final store."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mutants"))

import body_mutants
from mutant_registry import MUTANTS, caught_and_explained

import pallaslab


def _compared(name):
    m = MUTANTS[name]
    fn, args = m.case()
    return m, pallaslab.compare(fn, *args, executors=",".join(m.executors),
                                reference=m.reference)


def test_off_by_one_vocabulary_mask_names_the_mask_line():
    m, result = _compared("masked_logits_off_by_one")
    caught, explained, said = caught_and_explained(m, result)
    assert caught and explained, said
    (cause,) = [c for o in result.outputs for c in o.causes if c.kind == "line"]
    assert cause.through[0].role == "mask"
    assert cause.through[0].text.startswith("valid = (col < VOCAB - 9)")
    assert "(a mask that differs at the wrong elements)" in cause.message


def test_a_line_it_cannot_narrow_is_said_plainly():
    _, result = _compared("causal_scores_strict_mask")
    (cause,) = [c for o in result.outputs for c in o.causes if c.kind == "line"]
    assert "so the line cannot be narrowed further" in cause.message
    assert body_mutants.VOCAB == 200

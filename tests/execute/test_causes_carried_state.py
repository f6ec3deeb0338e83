"""Index-map blame where scratch carries values between programs (issue 38): a value bug in
an online softmax's body is no index map's fault, since the programs before the writer (on
the same parallel coordinates) read every block the row needs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mutants"))

import body_mutants

import pallaslab


def test_a_body_value_bug_behind_scratch_gets_no_index_map_cause():
    fn, args = body_mutants.online_softmax_no_rescale()
    result = pallaslab.compare(fn, *args, executors="vectorized,reference",
                               reference=body_mutants.softmax_ref)
    causes = result.outputs[0].causes
    assert result.outcome == "mismatch"
    assert [c.kind for c in causes if c.kind == "index-map"] == []
    assert any(c.kind == "line" for c in causes)

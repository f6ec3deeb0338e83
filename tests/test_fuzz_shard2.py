"""The differential fuzzer's second shard of fixed-seed kernels (the first, and the fuzzer's
other tests: tests/test_fuzz.py), a file of its own so pytest-xdist runs the two at once."""

from __future__ import annotations

from fuzz.runner import DISAGREEMENT, FALSE_ERROR, INTERNAL_ERROR, MUTANT_MISSED
from fuzz.suite import KERNELS, SHARDS, failures, shard_campaign


def test_fixed_seed_kernels_of_the_second_shard_get_right_verdicts():
    tally = shard_campaign(1)
    assert not failures(tally), "\n".join(failures(tally))
    for outcome in (INTERNAL_ERROR, FALSE_ERROR, DISAGREEMENT, MUTANT_MISSED):
        assert tally.count(outcome) == 0
    assert tally.summary_line().startswith(f"fuzz: {KERNELS // SHARDS} kernels, internal "
                                           "errors 0, false errors 0, disagreements 0")

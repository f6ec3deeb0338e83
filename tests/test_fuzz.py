"""The differential fuzzer (tests/fuzz): the generator is reproducible, a fixed-seed run of
generated kernels gets no wrong verdict from pallaslab, and a kernel written out as a case
file reproduces its verdict through pallaslab's case loader."""

from __future__ import annotations

import collections
import dataclasses

import pytest
from fuzz.casefile import write_case
from fuzz.grammar import FAMILIES, generate
from fuzz.mutate import MUTATIONS
from fuzz.runner import (
    DISAGREEMENT,
    FALSE_ERROR,
    INTERNAL_ERROR,
    MUTANT_CAUGHT,
    MUTANT_MISSED,
    PASSED,
    judge,
    judge_many,
)
from fuzz.suite import KERNELS, SHARDS, failures, shard_campaign

import pallaslab
from pallaslab.cases import load_case, load_function


@pytest.fixture(scope="module")
def tally():
    return shard_campaign(0)  # the other shard: tests/test_fuzz_shard2.py


def test_generator_is_deterministic_per_seed_and_index():
    assert [generate(3, i) for i in range(200)] == [generate(3, i) for i in range(200)]
    assert generate(3, 17) == generate(3, 17)  # without drawing the kernels before it
    assert [generate(3, i) for i in range(20)] != [generate(4, i) for i in range(20)]


def test_grammar_reaches_every_family_and_mutation():
    drawn = [generate(1, i) for i in range(3000)]
    assert {g.kernel.family for g in drawn} == set(FAMILIES)
    assert {g.mutation for g in drawn} - {None} == set(MUTATIONS)
    features = collections.Counter(f for g in drawn for f in g.kernel.features)
    for feature in ("grid-rank:1", "grid-rank:3", "squeezed", "transposed", "partial-edge",
                    "scalar-prefetch", "pl.ds-chunks", "body:reduce", "body:dot",
                    "map:reversed", "map:broadcast", "map:strided", "copy:async",
                    "copy:sync", "layout:rows", "tpu-pipeline", "outer-grid",
                    "pipeline-map:reversed", "pipeline-map:rotated", "layout:histogram",
                    "layout:split", "rank-0-atomic", "op:atomic-min", "mosaic-gpu", "f16",
                    "stages:3", "tpu-multi", "devices:4"):
        assert features[feature], feature


def test_fixed_seed_kernels_get_right_verdicts(tally):
    assert not failures(tally), "\n".join(failures(tally))
    for outcome in (INTERNAL_ERROR, FALSE_ERROR, DISAGREEMENT, MUTANT_MISSED):
        assert tally.count(outcome) == 0
    assert tally.summary_line().startswith(f"fuzz: {KERNELS // SHARDS} kernels, internal "
                                           "errors 0, false errors 0, disagreements 0, "
                                           "mutants caught ")
    assert {v.generated.kernel.family for v in tally.verdicts} == set(FAMILIES)


def test_a_wrong_kernel_judged_among_right_ones_gets_its_own_verdict():
    """judge_many compares a batch at once: a pass only where every kernel passes, a caught
    mutant only where its own output mismatched; else the batch is judged again in halves.
    A wrong kernel passed off as correct is the one disagreement, its batch-mates pass."""
    drawn = [generate(9, i, families=("tpu-pipeline",), mutant_rate=0.5) for i in range(12)]
    right = [g for g in drawn if not g.mutation][:3]
    mutant = next(g for g in drawn if g.mutation)
    disguised = dataclasses.replace(mutant, mutation=None)  # judged as a correct kernel
    verdicts = judge_many([right[0], disguised, *right[1:], mutant], batch=8)
    assert [v.outcome for v in verdicts] == [PASSED, DISAGREEMENT, PASSED, PASSED, MUTANT_CAUGHT]
    assert verdicts[1].detail == judge(disguised).detail


def test_written_case_reproduces_a_caught_mutant(tmp_path):
    g = next(g for i in range(100) if (g := generate(5, i)).mutation == "map-off-by-one")
    path = write_case(g, MUTANT_MISSED, "written by the test", "interpret,reference", tmp_path)
    case = load_case(f"{path}:case")
    reference = load_function(f"{path}:reference")
    result = pallaslab.compare(case.fn, *case.args, executors="interpret,reference",
                               reference=reference, timeout=60)
    assert result.outcome == "mismatch", result.verdict()


def test_atomic_kernels_are_judged_by_the_numpy_model_alone():
    """JAX's interpreter runs no masked or rank-0 atomic: the NumPy model is the oracle, and it
    models each mutant too (an equivalent one is set aside, a wrong one caught)."""
    drawn = [generate(4, i, families=("gpu-atomics",), mutant_rate=0.5) for i in range(40)]
    right = next(g for g in drawn if not g.mutation and g.kernel.layout == "histogram")
    counter = next(g for g in drawn if g.mutation == "store-not-atomic")
    wrong_bin = next(g for g in drawn if g.mutation == "atomic-wrong-index")
    verdicts = judge_many([right, counter, wrong_bin])
    assert [v.outcome for v in verdicts] == [PASSED, MUTANT_CAUGHT, MUTANT_CAUGHT]
    assert verdicts[1].check_errors  # check sees the plain store racing across programs

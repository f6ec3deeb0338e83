"""The differential fuzzer (tests/fuzz): the generator is reproducible, a fixed-seed run of
generated kernels gets no wrong verdict from pallaslab, and a kernel written out as a case
file reproduces its verdict through pallaslab's case loader."""

from __future__ import annotations

import collections

import pytest
from fuzz.campaign import run_campaign
from fuzz.casefile import write_case
from fuzz.grammar import FAMILIES, generate
from fuzz.mutate import MUTATIONS
from fuzz.runner import DISAGREEMENT, FALSE_ERROR, INTERNAL_ERROR, MUTANT_MISSED

import pallaslab
from pallaslab.cases import load_case, load_function

SEED = 20240601
KERNELS = 16  # about 2 s each (four executors and the check) on a 2-core machine


@pytest.fixture(scope="module")
def tally():
    return run_campaign(SEED, seconds=float("inf"), max_kernels=KERNELS)


def test_generator_is_deterministic_per_seed_and_index():
    assert [generate(3, i) for i in range(200)] == [generate(3, i) for i in range(200)]
    assert generate(3, 17) == generate(3, 17)  # without drawing the kernels before it
    assert [generate(3, i) for i in range(20)] != [generate(4, i) for i in range(20)]


def test_grammar_reaches_every_family_and_mutation():
    drawn = [generate(1, i) for i in range(1500)]
    assert {g.kernel.family for g in drawn} == set(FAMILIES)
    assert {g.mutation for g in drawn} - {None} == set(MUTATIONS)
    features = collections.Counter(f for g in drawn for f in g.kernel.features)
    for feature in ("grid-rank:1", "grid-rank:3", "squeezed", "transposed", "partial-edge",
                    "scalar-prefetch", "pl.ds-chunks", "body:reduce", "body:dot",
                    "map:reversed", "map:broadcast", "map:strided", "copy:async",
                    "copy:sync", "layout:rows"):
        assert features[feature], feature


def test_fixed_seed_kernels_get_right_verdicts(tally):
    failed = [f"{v.outcome} {v.generated.name}: {v.detail}" for v in tally.failures]
    assert not failed, "\n".join(failed)
    for outcome in (INTERNAL_ERROR, FALSE_ERROR, DISAGREEMENT, MUTANT_MISSED):
        assert tally.count(outcome) == 0
    assert tally.summary_line().startswith(f"fuzz: {KERNELS} kernels, internal errors 0, "
                                           "false errors 0, disagreements 0, mutants caught ")


def test_written_case_reproduces_a_caught_mutant(tmp_path):
    g = next(g for i in range(100) if (g := generate(5, i)).mutation == "map-off-by-one")
    path = write_case(g, MUTANT_MISSED, "written by the test", "interpret,reference", tmp_path)
    case = load_case(f"{path}:case")
    reference = load_function(f"{path}:reference")
    result = pallaslab.compare(case.fn, *case.args, executors="interpret,reference",
                               reference=reference, timeout=60)
    assert result.outcome == "mismatch", result.verdict()

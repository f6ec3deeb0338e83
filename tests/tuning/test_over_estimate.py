"""A candidate out only by the VMEM estimate and within 25% of the limit is "over by the
estimate" (issue 40): with `compile_top` > 0 the compiler is asked in its place by predicted
time, and its verdict decides; each row says which decided."""

from __future__ import annotations

import pytest
from tuning.matmul_case import arguments, matmul

import pallaslab
from pallaslab.tuning import search
from pallaslab.tuning.result import Verdict

# f32 1024 x 1024 x 1024 on v5e (16 MiB scoped limit): the estimate's need per config
OVER = {"bm": 512, "bn": 1024, "bk": 1024}  # 20 MiB: over by the estimate (<= 125%)
OVER_TOO = {"bm": 1024, "bn": 512, "bk": 1024}  # 20 MiB: over by the estimate
FAR = {"bm": 1024, "bn": 1024, "bk": 512}  # 24 MiB: plainly out
FITS = {"bm": 512, "bn": 512, "bk": 512}  # 8 MiB
SPACE = [FITS, OVER, OVER_TOO, FAR]


def by_config(result, config):
    return next(c for c in result.candidates if c.config == config)


def test_model_only_the_estimate_decides_and_says_so():
    result = pallaslab.tune(matmul, SPACE, *arguments(), chip="v5e", compile_top=0)
    over, far = by_config(result, OVER), by_config(result, FAR)
    assert over.out and over.over_estimate and over.decided_by == "the estimate"
    assert over.reason.startswith("over by the estimate: does not fit v5e")
    assert far.out and not far.over_estimate and far.decided_by is None
    assert by_config(result, FITS).decided_by is None
    assert "(the estimate decided)" in result.to_text(200)
    rows = {tuple(c["config"].values()): c for c in result.to_json()["candidates"]}
    assert rows[tuple(OVER.values())]["decided_by"] == "the estimate"


def test_the_compilers_verdict_decides_a_candidate_over_by_the_estimate(monkeypatch):
    asked = []

    def verdict(candidate, target):  # a stand-in compiler: accepts OVER, refuses the rest
        asked.append(candidate.config)
        if candidate.config in (OVER, FITS):
            return Verdict(target, True)
        return Verdict(target, False, "vmem-oom", "scoped VMEM exhausted")

    monkeypatch.setattr(search, "compiler_verdict", verdict)
    result = pallaslab.tune(matmul, SPACE, *arguments(), target="tpu-v5e", compile_top=3)
    over, refused, far = by_config(result, OVER), by_config(result, OVER_TOO), by_config(
        result, FAR)
    assert not over.out and over.rank is not None and over.compiles is True
    assert over.decided_by == "the compiler"
    assert refused.out and refused.decided_by == "the compiler"
    assert refused.reason.startswith("over by the estimate, and the compiler refuses it")
    assert far.out and far.verdicts == () and FAR not in asked  # beyond 25%: not compiled
    text = result.to_text(200)
    assert "over by the estimate; the compiler decided" in text
    assert "(the compiler decided)" in text


@pytest.mark.tpu_compiler
def test_libtpu_decides_the_borderline_candidates():
    pytest.importorskip("libtpu")
    result = pallaslab.tune(matmul, [OVER, OVER_TOO], *arguments(), target="tpu-v5e",
                            compile_top=2)
    for c in result.candidates:
        assert c.over_estimate and c.decided_by == "the compiler"
        assert c.out == (c.compiles is False), c

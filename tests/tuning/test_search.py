"""`pallaslab.tune` on a real tiled matmul (issue 40): configs that do not capture or do not
fit VMEM are out with their reason, the rest ranked by the pipeline model's predicted time,
and the fastest few compiled by libtpu."""

from __future__ import annotations

import json
import math
import sys

import pytest
from tuning.matmul_case import arguments, matmul

import pallaslab
from pallaslab.tuning.space import TuneSpaceError

SPACE = {"bm": [256, 384, 1024], "bn": [256, 1024], "bk": [512, 1024]}


@pytest.fixture(scope="module")
def result():
    return pallaslab.tune(matmul, SPACE, *arguments(), chip="v5e", compile_top=0)


def by_config(result, **config):
    return next(c for c in result.candidates if c.config == config)


def test_every_config_is_judged_once(result):
    assert len(result.candidates) == 12
    assert result.chips == ("v5e",) and result.params == ("bm", "bn", "bk")


def test_an_oversize_block_is_out_on_v5e_with_the_vmem_reason(result):
    c = by_config(result, bm=1024, bn=1024, bk=1024)
    assert c.out and c.rank is None
    assert c.reason.startswith("over by the estimate: does not fit v5e: ")  # 20 of 16 MiB
    assert "_kernel on TPU v5e: " in c.reason and "16.00 MiB scoped-VMEM limit" in c.reason
    assert not c.chip("v5e").fits and c.chip("v5e").vmem_bytes > c.chip("v5e").limit


def test_a_block_that_does_not_divide_is_out_with_its_reason(result):
    c = by_config(result, bm=384, bn=256, bk=512)
    assert c.out
    assert c.reason == "capture failed: ValueError: bm=384 does not divide the dimension 1024"


def test_the_ranking_is_by_predicted_time(result):
    ranked = result.ranked
    assert ranked and [c.rank for c in ranked] == list(range(1, len(ranked) + 1))
    times = [c.time("v5e") for c in ranked]
    assert all(math.isfinite(t) and t > 0 for t in times)
    assert times == sorted(times)
    assert result.best is ranked[0]
    assert all(c.chip("v5e").bound in ("compute", "HBM", "exposed DMA", "per-step overhead")
               for c in ranked)
    assert all(c.out for c in result.candidates[len(ranked):])


def test_larger_blocks_move_less_and_rank_higher(result):
    # the same matmul with 256-row blocks reads y 4x more often than with 1024-row ones
    assert by_config(result, bm=256, bn=1024, bk=512).rank < \
        by_config(result, bm=256, bn=256, bk=512).rank


def test_the_fastest_get_libtpus_verdict():
    pytest.importorskip("libtpu")
    space = {"bm": [256, 512], "bn": [256], "bk": [512, 1024]}
    result = pallaslab.tune(matmul, space, *arguments(), target="tpu-v5e", compile_top=2)
    assert result.targets == ("tpu-v5e",) and result.chips == ("v5e",)
    top, rest = result.ranked[:2], result.ranked[2:]
    assert all(c.compiles is True and c.verdicts[0].target == "tpu-v5e" for c in top)
    assert all(c.verdicts == () and c.compiles is None for c in rest)
    again = pallaslab.tune(matmul, space, *arguments(), target="tpu-v5e", compile_top=2)
    assert all(v.cached for c in again.ranked[:2] for v in c.verdicts)  # the lowering cache


def test_a_list_of_configs_and_per_chip_estimates():
    configs = [{"bm": 256, "bn": 256, "bk": 512}, {"bm": 512, "bn": 512, "bk": 512}]
    result = pallaslab.tune(matmul, configs, *arguments(), chip=["v5e", "v6e"], compile_top=0)
    assert result.chips == ("v5e", "v6e")
    for c in result.ranked:
        assert c.chip("v6e").time < c.chip("v5e").time  # v6e: more bandwidth and flops
    assert {c.config["bm"] for c in result.top(2, chip="v6e")} == {256, 512}


def test_a_time_limit_leaves_the_rest_out_saying_so():
    result = pallaslab.tune(matmul, SPACE, *arguments(), chip="v5e", compile_top=0, timeout=1e-9)
    assert result.stopped and "time limit of 1e-09 s ran out" in result.stopped
    assert any(c.reason and c.reason.startswith("not judged: ") for c in result.candidates)


@pytest.mark.parametrize(("space", "words"), [
    ({}, "no candidate configs"),
    ({"bm": []}, "parameter 'bm' has no candidate values"),
    ({"b m": [1]}, "parameter 'b m'; rule: a parameter is a Python identifier"),
    ("bm=128", "tune space: str 'bm=128'; rule: a space maps parameter names"),
    ([{"bm": 1}, 3], "item 1 is 3; rule: each config of a list is a dict"),
])
def test_a_bad_space_is_an_error_naming_the_rule(space, words):
    with pytest.raises(TuneSpaceError) as err:
        pallaslab.tune(matmul, space, *arguments())
    assert words in str(err.value)


def test_a_bad_compile_top_names_the_rule():
    with pytest.raises(TuneSpaceError, match=r"compile_top=-1; rule: a whole number >= 0"):
        pallaslab.tune(matmul, {"bm": [256]}, *arguments(), compile_top=-1)


def test_text_html_and_json_render_one_structure(result):
    text = result.to_text()
    assert "12 candidate(s): " in text and "chosen: {'bm': " in text
    assert "bm=384 bn=256 bk=512" in text and "does not divide" in text
    html = result.to_html()
    assert "<table" in html and "<svg" in html and "does not divide" in html
    data = json.loads(json.dumps(result.to_json()))
    assert data["best"] == result.best.config
    assert data["candidates"][0]["rank"] == 1 and data["candidates"][-1]["out"]


def test_the_heatmap_is_skipped_with_a_note_without_matplotlib(result, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    html = result.to_html()
    assert "<svg" not in html and "heatmap skipped: matplotlib is not installed" in html

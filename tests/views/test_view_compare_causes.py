"""The Compare view's causes: why an output is wrong, and each wrong element's last writer and
what it read, in the payload, the text and the HTML."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from compared import explained, wrong_comparison

from pallaslab.views import compare_payload as compare_payload_module
from pallaslab.views.compare import CompareView, compare_payload


@pytest.fixture(scope="module")
def wrong():
    return wrong_comparison()


@pytest.fixture(scope="module")
def explained_(wrong):
    wb, view, _ = wrong
    return wb, explained(view.comparison)


def test_causes_and_each_wrong_elements_last_writer_reach_the_payload(explained_):
    wb, comparison = explained_
    ctx = wb.context(0)
    p = compare_payload(comparison, ctx.kernel, ctx.tiling)
    (out,) = p["outputs"]
    assert out["causes"] == [{"kind": "line", "operand": None, "line": "kernels.py:390",
                              "programs": [[2]], "message": "8,192 wrong elements, all last "
                              "written by kernels.py:390 in program (2,)"}]
    w = out["pairs"][0]["writers"]
    assert w["programs"] == [[0], [1], [2], [3]] and w["lines"] == ["kernels.py:390"]
    element = np.frombuffer(p["tables"][w["element"]], "<i4").reshape(256, 128)
    program = np.frombuffer(p["tables"][w["program"]], "<i4").reshape(256, 128)
    assert element[130, 5] == 130 * 128 + 5  # one element a cell: itself
    assert program[130, 5] == 2 and program[10, 0] == 0
    # what program (2,) read inside its blocks, in the array's coordinates
    assert w["reads"][2].startswith("x_ref[") and "(all of its block)" in w["reads"][2]


def test_a_downsampled_cell_names_its_first_wrong_element(explained_, monkeypatch):
    monkeypatch.setattr(compare_payload_module, "HEAT_SIDE", 64)  # 4 x 2 elements a cell
    wb, comparison = explained_
    ctx = wb.context(0)
    p = compare_payload(comparison, ctx.kernel, ctx.tiling)
    out = p["outputs"][0]
    assert (out["rows"], out["cols"], out["factor"]) == (64, 64, [4, 2])
    w = out["pairs"][0]["writers"]
    element = np.frombuffer(p["tables"][w["element"]], "<i4").reshape(64, 64)
    assert element[32, 3] == 128 * 128 + 6  # cell rows 128..131, cols 6..7: its first
    assert element[0, 0] == 0  # a cell with nothing wrong: its first element


def test_causes_are_said_in_text_and_html(explained_):
    wb, comparison = explained_
    view = CompareView(wb.context(0), comparison)
    said = "8,192 wrong elements, all last written by kernels.py:390 in program (2,)"
    text = view.to_text()
    assert f"  Why output outputs is wrong:\n    line: {said}" in text
    writer = ("8,192 wrong elements last written by program (2,) at kernels.py:390, which read "
              "x_ref[")
    assert f"    {writer}" in text
    html = view.to_html()
    assert "Why output <code>outputs</code> is wrong" in html and said in html
    assert 'data-kind="line"' in html
    assert writer in html


def test_a_comparison_without_provenance_sends_no_writers(wrong):
    wb, view, _ = wrong
    ctx = wb.context(0)
    c = view.comparison
    bare = type(c)(c.executors, c.results, tuple(
        dataclasses.replace(o, causes=(), provenance=None) for o in c.outputs), c.kernels)
    p = compare_payload(bare, ctx.kernel, ctx.tiling)
    assert p["outputs"][0]["causes"] == [] and p["outputs"][0]["pairs"][0]["writers"] is None


def test_the_real_provenance_names_the_writer_and_what_it_read(wrong):
    """End to end with the comparison's own causes and provenance: the wrong block's writer
    read x rows 192..255 where the reference needs rows 128..191."""
    wb, view, _ = wrong
    assert view.comparison.outputs[0].provenance is not None
    ctx = wb.context(0)
    p = compare_payload(view.comparison, ctx.kernel, ctx.tiling)
    w = p["outputs"][0]["pairs"][0]["writers"]
    program = np.frombuffer(p["tables"][w["program"]], "<i4").reshape(256, 128)
    line = np.frombuffer(p["tables"][w["line"]], "<i4").reshape(256, 128)
    assert w["programs"][program[130, 5]] == [2]
    assert w["lines"][line[130, 5]].startswith("kernels.py:")
    assert w["reads"][program[130, 5]] == "x_ref[192:256, 0:128] (all of its block)"
    kinds = [c["kind"] for c in p["outputs"][0]["causes"]]
    assert "index-map" in kinds and "line" in kinds

"""The Pipeline headline of a kernel that moves its own data (issue 39 item 3): what its DMAs
move, never "0 B, 100% compute-bound"; long recorded-event tables folded."""

from __future__ import annotations

import pytest
from kernels import CATALOG

import pallaslab
from pallaslab.views.pipeline_record import FOLDED_ROWS


@pytest.fixture(scope="module")
def view():
    fn, args = CATALOG["manual_dma_double_buffer"].case()[:2]
    return pallaslab.inspect(fn, *args).view("pipeline")


def test_headline_says_what_the_dmas_moved_in_the_recorded_run(view):
    moved = view.payload()["dma_traffic"]
    assert moved["bytes"] == 262_144 and moved["dmas"] == 8 and moved["recorded"]
    assert moved["text"] == "262,144 B in 8 DMAs (recorded tpu-interpret run)"
    assert moved["exposed"] == "not estimated: the model does not time the kernel's own DMAs"
    text = view.to_text()
    assert "compute-bound" not in text and "HBM traffic 0 B" not in text
    assert "exposed copy time not estimated" in text
    assert "moved by its DMAs 262,144 B in 8 DMAs (recorded tpu-interpret run)" in text
    html = view.to_html()
    assert "compute-bound" not in html and "0 B<" not in html
    assert "<dt>moved by its DMAs</dt><dd>262,144 B in 8 DMAs" in html


def test_without_a_run_the_headline_counts_the_dmas_as_written(view):
    from pallaslab.views.pipeline_manual import dma_traffic

    moved = dma_traffic(view.ctx.kernel, None)
    # 3 copies of 32 KiB as written; the loop's two counted once, so a lower bound
    assert moved is not None and moved["bytes"] == 98_304 and moved["lower_bound"]
    assert moved["text"] == ("at least 98,304 B per program as written (3 DMAs; 2 in a loop "
                             "counted once)")


def test_blockspec_kernels_keep_the_models_headline():
    fn, args = CATALOG["matmul_f32"].case()[:2]
    view = pallaslab.inspect(fn, *args).view("pipeline")
    assert view.payload()["dma_traffic"] is None
    assert "% compute-bound" in view.to_text() and "HBM traffic 3,932,160 B" in view.to_text()


def test_long_recorded_tables_are_folded_in_static_html(view):
    ops = view.payload()["recorded"]["ops"]
    assert len(ops) == 24 > FOLDED_ROWS
    html = view.to_html()
    shown, folded = html.split('<details class="pl-fold">')
    assert "<summary>show all 24 events</summary>" in folded
    recorded = shown.split("<h4>Recorded run")[1]
    assert recorded.count("<tr") - 1 == FOLDED_ROWS  # header + the first rows
    assert folded.count("<tr") - 1 == 24 - FOLDED_ROWS

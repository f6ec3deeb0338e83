"""The Pipeline headline of a kernel that moves its own data (issue 39 item 3): what its DMAs
move, never "0 B, 100% compute-bound"; the recorded events worded once for text and HTML."""

from __future__ import annotations

import pytest
from kernels import CATALOG

import pallaslab
from pallaslab.views._html import esc
from pallaslab.views.pipeline_record import op_line


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
    assert "moved by its DMAs <b>262,144 B in 8 DMAs (recorded tpu-interpret run)</b>" in html


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


def test_the_recorded_events_read_the_same_in_text_and_html(view):
    ops = view.payload()["recorded"]["ops"]
    text, html = view.to_text(), view.to_html()
    assert "In order (24 events)" in text and "In order (24 events)" in html
    for o in ops:
        line = op_line(o)
        assert line.strip() in text and esc(line) in html


def test_a_kernel_running_nested_pipelines_is_timed_with_them():
    # Tutorial 05's kernel: operands left in HBM, the body an emit_pipeline over an inner
    # (2, 2, 2) grid. The headline counts the nested pipeline's steps and traffic, not the
    # kernel's own single step ("predicted 541.6 ns, HBM traffic 0 B" above a 3.04 µs pipeline).
    import kernels_tpu

    from pallaslab.analysis.pipeline import pipeline
    from pallaslab.views.pipeline_manual import format_time

    fn, args = kernels_tpu.emit_pipeline_matmul()
    view = pallaslab.inspect(fn, *args).view("pipeline")
    inner = pipeline(view.ctx.kernel.pipelines[0], view.chip).summary
    lines = view.to_text().splitlines()
    assert lines[1] == f"  1 steps, predicted {format_time(inner.predicted_time)} (with its " \
        "nested pipelines)"
    assert (f"  HBM traffic {inner.hbm_bytes:,} B (0 B through the kernel's BlockSpecs, "
            f"{inner.hbm_bytes:,} B through its nested pipelines)") in lines
    # the widget lists the facts the text shows, worded once
    facts = view.payload()["facts"]
    assert facts[:2] == [["steps", "1"], ["predicted", lines[1].split("predicted ")[1]]]
    assert [f"  {a} {b}" for a, b in facts[2:]] == lines[2:2 + len(facts) - 2]

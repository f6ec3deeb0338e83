"""Views that agree (issue 26, item 3): the workbench header's verdict counts the comparison's
failures, and a workbench opened with devices=N says when its tabs describe another trace than
the N-device run of its Step and Devices tabs. Also the outputs a workbench displays (item 2):
the live widget, then the static copy a saved notebook shows."""

from __future__ import annotations

import jax
import pytest
from kernels import CATALOG, shifted_block_reference

import pallaslab
from pallaslab.views.base import LIVE_CLASS, SAVED_CLASS, WIDGET_VIEW, live_and_saved_bundles
from pallaslab.workbench import Workbench, _header_html, header_verdict


@pytest.fixture(scope="module")
def compared():
    fn, args = CATALOG["shifted_block_wrong"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    wb.compare(executors="interpret,reference", reference=shifted_block_reference)
    return wb


def test_header_counts_the_comparison_mismatch(compared):
    verdict = header_verdict(compared.contexts[0])
    assert verdict.findings == 0  # the static analysis sees nothing wrong ...
    assert verdict.problems == ("MISMATCH",) and not verdict.ok  # ... the comparison does
    html = _header_html(compared.contexts[0])
    assert "compare: MISMATCH" in html and 'data-ok="false"' in html
    assert "no errors" not in html
    assert "compare: MISMATCH" in compared.to_html()  # the static workbench says it too


def test_header_of_an_incomplete_comparison():
    fn, args = CATALOG["shifted_block_wrong"].case()[:2]
    wb = pallaslab.inspect(fn, *args)

    def raises(x):
        raise RuntimeError("no reference today")

    wb.compare(executors="interpret,reference", reference=raises)
    assert header_verdict(wb.contexts[0]).problems == ("incomplete",)
    assert "compare: incomplete" in _header_html(wb.contexts[0])


def test_header_of_a_clean_kernel_with_and_without_a_comparison():
    fn, args = CATALOG["matmul_f32"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    assert header_verdict(wb.contexts[0]).status == "no errors"
    wb.compare(executors="interpret,reference", reference=lambda x, y: x @ y)
    verdict = header_verdict(wb.contexts[0])
    assert verdict.ok and verdict.status == "no errors · compare: all close"


def test_shown_header_is_refreshed_by_a_later_comparison():
    pytest.importorskip("ipywidgets")
    fn, args = CATALOG["shifted_block_wrong"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    header = wb.widget.children[0].children[0]
    assert "no errors" in header.value
    wb.compare(executors="interpret,reference", reference=shifted_block_reference)
    assert "compare: MISMATCH" in header.value


def test_a_workbench_displays_its_widget_then_its_static_copy(compared):
    pytest.importorskip("anywidget")
    live, saved = live_and_saved_bundles(lambda: compared.widget, compared.to_text,
                                         compared.to_html)
    assert WIDGET_VIEW in live and "Grid of kernel 0" in live["text/plain"]
    assert LIVE_CLASS in compared.widget._dom_classes
    # renderers without the widget (nbviewer, GitHub) read the copy, not a second one
    assert "Compare" not in live["text/html"]
    assert set(saved) == {"text/html"} and SAVED_CLASS in saved["text/html"]
    assert "compare: MISMATCH" in saved["text/html"] and "MISMATCH" in saved["text/html"]


def test_a_view_displays_its_widget_then_its_static_copy():
    pytest.importorskip("anywidget")
    fn, args = CATALOG["matmul_f32"].case()[:2]
    view = pallaslab.inspect(fn, *args).grid()
    live, saved = live_and_saved_bundles(lambda: view.widget, view.to_text, view.to_html)
    assert WIDGET_VIEW in live and SAVED_CLASS in saved["text/html"]
    assert "Grid of kernel 0 <code>matmul_kernel</code>" in saved["text/html"]


@pytest.fixture(scope="module")
def on_four_devices():
    """A ring all-gather inside shard_map, in a workbench opened with devices=4: traced here on
    this process's one device (one program over the whole (32, 128) array), on 4 devices
    three programs per device over an (8, 128) shard each."""
    fn, args = CATALOG["ring_all_gather"].case()[:2]
    cap = pallaslab.capture(fn, *args)
    assert cap.kernels[0].grid == (jax.device_count() - 1 or 1,)  # the trace here
    return Workbench(cap, options={"devices": 4})


def test_every_tab_of_a_workbench_on_four_devices_describes_the_per_device_kernel(
        on_four_devices):
    wb = on_four_devices
    assert [t.name for t in wb.tabs()][:4] == ["overview", "grid", "memory", "pipeline"]
    assert "lowering" in [t.name for t in wb.tabs()]  # lowered from the capture, on 4 devices
    lowered = wb.view("lowering").result("tpu-v5e", compile=False)
    assert lowered.ok, [d.message for d in lowered.errors]
    assert "8x128" in lowered.stage("mosaic").text  # the per-device shard, as Mosaic sees it
    overview = wb.overview().payload()
    shapes = {op["origin"]: op["shape"] for op in overview["kernel"]["operands"]}
    assert overview["kernel"]["grid"] == [3] and overview["kernel"]["programs"] == 3
    assert shapes["args[0]"] == [8, 128] and shapes["outputs"] == [4, 8, 128]
    assert "traced on 4 simulated devices" in overview["devices_note"]
    assert "grid 3" in _header_html(wb.contexts[0])
    grid = wb.grid().payload()
    assert grid["grid"] == [3] and grid["programs"] == 3
    assert "Grid of kernel 0 body: 3 = 3 programs" in wb.grid().to_text()
    assert "float32[8, 128]" in wb.grid().to_text()
    # one receive semaphore per ring step: 3 on 4 devices (1 on one device)
    row = next(ln.split() for ln in wb.view("memory").to_text().splitlines() if "scratch[2]" in ln)
    assert row[row.index("semaphore"):][:4] == ["semaphore", "3", "semaphore", "1"]  # 1 buffer
    assert "3 steps" in wb.view("pipeline").to_text()
    recorded = wb.view("pipeline").recorded_run  # its DMAs as they ran on the 4 devices
    assert recorded is not None and recorded.device_record.num_devices == 4
    step = wb.view("step").step()  # every device runs its first program: 1 of 3
    rows = step.payload()["rows"]
    assert [(r["programs"], r["total"]) for r in rows] == [(1, 3)] * 4
    step.close()


def test_a_workbench_that_cannot_trace_on_more_devices_says_which_trace_its_tabs_describe():
    import threading

    fn, args = CATALOG["ring_all_gather"].case()[:2]
    lock = threading.Lock()  # a closure that cannot travel to the worker process

    def unsendable(x):
        with lock:
            return fn(x)

    here = jax.device_count()
    cap = pallaslab.capture(unsendable, *args)
    more = Workbench(cap, options={"devices": here + 3})
    note = more.overview().payload()["devices_note"]
    assert note and f"on {here} device(s)" in note and f"{here + 3} simulated devices" in note
    assert f"tracing it on {here + 3} devices failed: the call cannot be sent" in note
    assert "lock" in note  # what could not be sent
    assert "traced in this process" in more.overview().to_text()
    assert 'data-role="devices-note"' in more.overview().to_html()
    assert more.overview().payload()["kernel"]["grid"] == list(cap.kernels[0].grid)
    same = Workbench(cap, options={"devices": here})
    assert same.overview().payload()["devices_note"] is None
    mm, mm_args = CATALOG["matmul_f32"].case()[:2]
    plain = Workbench(pallaslab.capture(mm, *mm_args), options={"devices": 4})
    assert plain.overview().payload()["devices_note"] is None  # not inside shard_map


def test_compare_text_html_and_terminal_render_one_tree(compared, capsys):
    """Issue 37 item 1: the Compare view's text and static HTML and `pallaslab compare`'s output
    are renderings of one tree, so a cause or a pair's figures cannot be worded twice."""
    from pallaslab.cli.compare import render
    from pallaslab.views.parts import Section, Table, plain, to_html, to_text

    view = compared.view("compare", 0)
    tree = view.tree()
    assert view.to_text() == to_text(tree)
    html = view.to_html()
    assert all(to_html(part) in html for part in tree.children)
    render(view.comparison)
    printed = " ".join(capsys.readouterr().out.split())
    causes = next(p for p in tree.children if isinstance(p, Section) and p.css == "pl-cmp-causes")
    assert plain(causes.title) in printed
    assert all(" ".join(to_text(n).split()) in printed for n in causes.children)
    output = next(p for p in tree.children if isinstance(p, Section) and p.css == "pl-cmp-output")
    pairs = next(p for p in output.children if isinstance(p, Table))
    assert all(plain(cell) in printed for cell in pairs.rows[0])

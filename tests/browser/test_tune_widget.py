"""The Tune view's ES module in real Chromium, against an in-page fake model: the heatmap has
a cell per config (configs out crossed, their reason on hover), clicking a column header sorts
the table, the copy field holds the chosen config, the axis selects redraw the heatmap, and
the roofline draws a point per ranked config; in a real JupyterLab, a TuneResult as a cell's
value is the live widget, offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import mount
from test_jupyterlab import lab, notebook, open_notebook, run_all  # noqa: F401
from tuning.matmul_case import arguments, matmul

import pallaslab
from pallaslab.tuning.widget import tune_payload


@pytest.fixture(scope="module")
def result():
    space = {"bm": [256, 384, 512], "bn": [256, 512], "bk": [512]}
    return pallaslab.tune(matmul, space, *arguments(), chip="v5e", compile_top=0)


@pytest.fixture(scope="module")
def result3():
    space = {"bm": [256, 512], "bn": [256, 512], "bk": [256, 512, 1024]}
    return pallaslab.tune(matmul, space, *arguments(), chip=["v5e", "v6e"], compile_top=0)


def ranks(page):
    return page.eval_on_selector_all("table.pl-tune-table tbody tr",
                                     "rows => rows.map(r => r.children[0].textContent)")


def test_the_heatmap_has_one_cell_per_config_and_marks_the_ones_out(page, result):
    mount(page, "tune.js", tune_payload(result))
    cells = page.locator("svg.pl-tune-heatmap g.pl-tune-cell")
    assert cells.count() == len(result.candidates) == 6
    out = page.locator("svg.pl-tune-heatmap g.pl-tune-out")
    assert out.count() == 2  # bm=384 does not divide 1024
    title = out.first.locator("title").text_content()
    reason = next(c.reason for c in result.candidates if c.out)
    assert "out" in title and reason in title
    best = result.best.config
    cell = page.locator(f'g.pl-tune-cell[data-x="{best["bm"]}"][data-y="{best["bn"]}"] title')
    assert result.best.label in cell.text_content()


def test_clicking_a_header_sorts_the_rows(page, result):
    mount(page, "tune.js", tune_payload(result))
    n = len(result.ranked)
    assert ranks(page)[:n] == [str(i) for i in range(1, n + 1)]  # rank order first
    page.click('th[data-col="rank"]')  # again: the other way, configs out still last
    assert ranks(page)[:n] == [str(i) for i in range(n, 0, -1)]
    assert ranks(page)[n:] == ["-"] * (len(result.candidates) - n)
    page.click('th[data-col="v5e us"]')
    times = page.eval_on_selector_all("table.pl-tune-table tbody tr",
                                      "rows => rows.map(r => r.children[2].textContent)")
    shown = [float(t) for t in times if t != "-"]
    assert shown == sorted(shown) and len(shown) == n
    page.click('th[data-col="config"]')
    labels = page.eval_on_selector_all("table.pl-tune-table tbody tr",
                                       "rows => rows.map(r => r.dataset.config)")
    assert labels == sorted(labels)
    assert page.locator('th[data-col="config"]').get_attribute("aria-sort") == "ascending"


def test_the_copy_field_holds_the_chosen_config(page, result):
    mount(page, "tune.js", tune_payload(result))
    field = page.locator("input.pl-tune-copy-field")
    assert field.input_value() == repr(result.best.config)
    page.click("button.pl-tune-copy")  # the clipboard is refused here: the field is selected
    selected = page.evaluate("() => { const f = document.querySelector('input.pl-tune-copy-field');"
                             " return f.value.slice(f.selectionStart, f.selectionEnd); }")
    assert selected == repr(result.best.config)


def test_axis_selects_redraw_the_heatmap_over_the_chosen_parameters(page, result3):
    mount(page, "tune.js", tune_payload(result3))
    cells = page.locator("svg.pl-tune-heatmap g.pl-tune-cell")
    assert cells.count() == 4  # bm x bn, the fastest bk in each
    page.select_option('select[data-axis="y"]', "bk")
    assert cells.count() == 6  # bm x bk
    assert sorted({cells.nth(i).get_attribute("data-y") for i in range(6)}) == \
        ["1024", "256", "512"]
    page.select_option('select[data-axis="chip"]', "v6e")
    assert "on v6e" in cells.first.locator("title").text_content()


def test_the_roofline_draws_a_point_per_ranked_config(page, result3):
    mount(page, "tune.js", tune_payload(result3))
    assert page.locator("svg.pl-tune-roofline").count() == 2
    points = page.locator('svg.pl-tune-roofline[data-chip="v5e"] circle.pl-tune-point')
    assert points.count() == len(result3.ranked)
    assert page.locator("svg.pl-tune-roofline path.pl-tune-roof").count() == 2


TESTS = Path(__file__).resolve().parents[1]
LAB_CELLS = [
    f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    "import pallaslab\n"
    "from tuning.matmul_case import arguments, matmul",
    "result = pallaslab.tune(matmul, {'bm': [256, 512], 'bn': [256, 512], 'bk': [512, 1024]},\n"
    "                        *arguments(), chip='v5e', compile_top=0)\n"
    "result",
]


def test_where_plotly_draws_the_heatmap_the_selects_tell_python(page, result3):
    p = tune_payload(result3)
    mount(page, "tune.js", {**p, "plotly": True, "part": "head"})
    assert page.locator("svg.pl-tune-heatmap").count() == 0  # plotly's figure draws it
    assert page.locator("table.pl-tune-table").count() == 0  # the body's
    assert page.locator("input.pl-tune-copy-field").input_value() == repr(result3.best.config)
    page.select_option('select[data-axis="y"]', "bk")
    assert page.evaluate("model.saved.at(-1)") == {"x": "bm", "y": "bk", "chip": "v5e"}
    mount(page, "tune.js", {**p, "plotly": True, "part": "body"})
    assert page.locator("table.pl-tune-table").count() == 1
    assert page.locator("select").count() == 0 and page.locator("svg.pl-tune-roofline").count() == 2


def test_a_tune_result_is_the_live_widget_in_jupyterlab(page, lab, results_dir):  # noqa: F811
    notebook(lab["root"] / "tune.ipynb", LAB_CELLS)
    open_notebook(page, lab, "tune.ipynb")  # only the Lab server reachable
    run_all(page)
    out = page.locator(".jp-Cell").nth(1)
    live = out.locator(".pl-live-widget")
    live.locator("table.pl-tune-table").wait_for(timeout=240000)
    assert live.locator("input.pl-tune-copy-field").input_value().startswith("{'bm': ")
    live.locator('th[data-col="rank"]').click()
    assert live.locator("tbody tr").first.locator("td").first.inner_text() == "8"
    # plotly's FigureWidget (its own bundled JavaScript) draws the heatmap, offline; the
    # view's y select redraws it from Python over bm x bk
    title = live.locator(".js-plotly-plot .g-ytitle")
    title.wait_for(timeout=60000)
    assert title.text_content() == "bn"
    live.locator('select[data-axis="y"]').select_option("bk")
    page.wait_for_function("() => document.querySelector('.js-plotly-plot .g-ytitle')"
                           "?.textContent === 'bk'", timeout=60000)
    assert not out.locator(".pl-saved-widget").first.is_visible()  # the copy hides under it
    out.screenshot(path=str(results_dir / "lab-tune.png"))
    assert page.requests_attempted == []  # offline: the widget's module travels with it

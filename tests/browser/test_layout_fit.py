"""Issue 26 item 5: the views fit their pane and nothing overlaps or is clipped, measured with
getBoundingClientRect in Chromium at the sizes a learner uses (1280x760: JupyterLab leaves an
output area about 812 px wide; 1440x1000)."""

from __future__ import annotations

import pytest
from harness import mount
from kernels import CATALOG

import pallaslab

PANES = {"1280x760": (1280, 760, 812), "1440x1000": (1440, 1000, 970)}
LONG = "x_ref (args[0] = activations_after_the_embedding_lookup)"


@pytest.fixture(scope="module")
def matmul_workbench():
    fn, args = CATALOG["matmul_f32"].case()[:2]
    return pallaslab.inspect(fn, *args)


def in_pane(page, width, height, pane):
    """The view's root narrowed to the output pane's width."""
    page.set_viewport_size({"width": width, "height": height})
    page.evaluate("(w) => { const r = document.getElementById('root');"
                  " r.style.width = w + 'px'; }", pane)


def overlaps(a, b):
    return not (a["right"] <= b["left"] or b["right"] <= a["left"]
                or a["bottom"] <= b["top"] or b["bottom"] <= a["top"])


RECT = "e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right," \
       " top: r.top, bottom: r.bottom}; }"


@pytest.mark.parametrize("size", sorted(PANES))
def test_grid_program_table_stays_beside_the_operand_panels(page, matmul_workbench, size,
                                                            results_dir):
    payload = matmul_workbench.grid().payload()
    for op in payload["operands"]:  # long caller names, as a notebook's arguments give
        op["label"] = LONG if op["origin"] == "args[0]" else op["label"]
    mount(page, "grid.js", payload)
    width, height, pane = PANES[size]
    in_pane(page, width, height, pane)
    tags = page.eval_on_selector_all(".pl-blocks .pl-tag", f"es => es.map({RECT})")
    panels = page.eval_on_selector_all(".pl-operand", f"es => es.map({RECT})")
    root = page.eval_on_selector("#root", RECT)
    assert tags and panels
    for tag in tags:  # every copy badge whole, inside the view and under no operand panel
        assert tag["right"] - tag["left"] > 20
        assert tag["right"] <= root["right"] + 0.5
        assert not any(overlaps(tag, p) for p in panels), (tag, panels)
    table = page.eval_on_selector(".pl-blocks", RECT)
    assert not any(overlaps(table, p) for p in panels), (table, panels)
    scroll = page.evaluate("() => { const g = document.querySelector('.pl-grid');"
                           " return [g.scrollWidth, g.clientWidth]; }")
    assert scroll[0] <= scroll[1] + 1, scroll
    page.screenshot(path=str(results_dir / f"layout-grid-{size}.png"))


@pytest.mark.parametrize("size", sorted(PANES))
def test_memory_view_fits_its_pane(page, matmul_workbench, size, results_dir):
    mount(page, "memory.js", matmul_workbench.memory().payload())
    width, height, pane = PANES[size]
    in_pane(page, width, height, pane)
    # inside a table's own sideways-scrolling box a cell may lie past the pane: not clipped
    sizes = page.evaluate("""() => Array.from(document.querySelectorAll('#root *'))
        .filter(e => e.getBoundingClientRect().right > document.getElementById('root')
                 .getBoundingClientRect().right + 0.5 && e.getClientRects().length
                 && !(e.closest('.pl-table') && e.closest('.pl-table') !== e
                      && getComputedStyle(e.closest('.pl-table')).overflowX === 'auto'))
        .map(e => e.className + ' ' + Math.round(e.getBoundingClientRect().right))""")
    assert not sizes, sizes  # nothing sticks out of the pane
    root = page.evaluate("() => { const r = document.getElementById('root');"
                         " return [r.scrollWidth, r.clientWidth]; }")
    assert root[0] <= root[1] + 1, root
    page.screenshot(path=str(results_dir / f"layout-memory-{size}.png"))


LINES = """(sel) => Array.from(document.querySelectorAll(sel)).map((e) => {
    const r = document.createRange(); r.selectNodeContents(e);
    const tops = new Set(Array.from(r.getClientRects()).map((q) => Math.round(q.top)));
    return [e.textContent, tops.size]; })"""


def test_star_args_labels_and_fact_names_stay_on_one_line(page, matmul_workbench, results_dir):
    """A `*args` parameter's label ("*args[0] (args[1])") or the fact "call site" wrapped in
    two reads as an extra row: each stays on one line in an 812 px pane."""
    payload = matmul_workbench.memory().payload()
    for chip in payload["chips"]:
        for op in chip["operands"]:
            if op["origin"] == "args[1]":
                op["label"] = "*args[0] (args[1])"
    mount(page, "memory.js", payload)
    in_pane(page, *PANES["1280x760"])
    labels = page.evaluate(LINES, ".pl-mem-table tr[data-origin] td:first-child")
    assert ["*args[0] (args[1])", 1] in labels
    assert all(n == 1 for _, n in labels), labels
    fn, args = CATALOG["reduction_revisited_output"].case()[:2]  # a tall, narrow x panel
    grid = pallaslab.inspect(fn, *args).grid().payload()
    for op in grid["operands"]:
        if op["origin"] == "args[0]":
            op["label"] = "*args[0] (args[1])"
    mount(page, "grid.js", grid)
    in_pane(page, *PANES["1280x760"])
    titles = page.evaluate(LINES, ".pl-operand h4 .pl-label")
    assert ["*args[0] (args[1])", 1] in titles and all(n == 1 for _, n in titles), titles
    mount(page, "overview.js", matmul_workbench.overview().payload())
    page.evaluate("() => { document.getElementById('root').style.width = '260px'; }")
    facts = page.evaluate(LINES, ".pl-facts dt")
    assert ["call site", 1] in facts and all(n == 1 for _, n in facts), facts


CELLS_WRAPPED = """() => Array.from(document.querySelectorAll('#root table td, #root table th'))
    .filter((e) => e.offsetParent !== null && e.textContent.trim()).map((e) => {
      const r = document.createRange(); r.selectNodeContents(e);
      const tops = new Set(Array.from(r.getClientRects()).filter((q) => q.width > 0)
        .map((q) => Math.round(q.top)));
      return [e.closest('table').className, e.textContent.trim(), tops.size]; })
    .filter(([, , n]) => n > 1)"""


def test_memory_tables_keep_one_line_per_cell_grid_legend_explains_in_vmem(
        page, matmul_workbench, results_dir):
    """Issue 39 item 6: at 1280x760 (an 812 px output pane) no cell of the Memory tab's tables
    wraps onto a second line (a wide table scrolls sideways in its own box); the Grid legend
    says what its "in VMEM" badge means."""
    mount(page, "memory.js", matmul_workbench.memory().payload())
    in_pane(page, *PANES["1280x760"])
    assert page.eval_on_selector_all("#root table", "ts => ts.length") >= 1
    assert page.evaluate(CELLS_WRAPPED) == []
    root = page.evaluate("() => { const r = document.getElementById('root');"
                         " return [r.scrollWidth, r.clientWidth]; }")
    assert root[0] <= root[1] + 1, root
    page.screenshot(path=str(results_dir / "layout-memory-cells-1280x760.png"), full_page=True)
    mount(page, "grid.js", matmul_workbench.grid().payload())
    legend = page.inner_text(".pl-legend")
    assert "in VMEM: the output block stays in VMEM across consecutive programs" in legend

"""Compare's "open in stepper" inside a real JupyterLab workbench (issue 10, seen item 7).

A `%%pallas --compare` cell opens the workbench on its Compare tab (the Grid tab never opened)
for a kernel with a real mismatch; opening the program that wrote the wrong block switches the
workbench to its Step tab, run to that program, and the Compare tab says exactly that. The Grid
tab, opened afterwards, shows the same program.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_jupyterlab import lab, notebook, open_notebook, run_all  # noqa: F401

TESTS = Path(__file__).resolve().parents[1]

CELLS = [
    f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    "%load_ext pallaslab\n"
    "from kernels import CATALOG, shifted_block_reference\n"
    "fn, (x,) = CATALOG['shifted_block_wrong'].case()",
    "%%pallas --compare interpret,reference=shifted_block_reference\n"
    "fn(x)",
]


def current_tab(page) -> str:
    return page.locator(".jp-OutputArea .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel") \
        .first.inner_text()


def test_open_in_stepper_switches_to_the_step_tab_and_says_what_happened(
        page, lab, results_dir):  # noqa: F811
    notebook(lab["root"] / "compare.ipynb", CELLS)
    open_notebook(page, lab, "compare.ipynb")
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()  # more room
    run_all(page)
    compare = page.locator(".jp-OutputArea .pl-compare")
    compare.wait_for(timeout=180000)
    assert current_tab(page) == "Compare"
    assert page.locator(".jp-OutputArea .pl-grid").count() == 0  # the Grid tab was not opened
    assert compare.get_attribute("data-outcome") == "mismatch"

    # the mismatched block (2, 0) was written by program (2,): open it in the stepper
    compare.locator("button.pl-cmp-block").first.click()
    assert compare.locator(".pl-cmp-program").first.get_attribute("data-program") == "2"
    compare.locator("button.pl-cmp-open").first.click()

    # the workbench switched to the Step tab, run to program (2,)
    step = page.locator(".jp-OutputArea .pl-step")
    step.wait_for(timeout=120000)
    page.wait_for_function(
        "document.querySelector('.jp-OutputArea .pl-step')?.dataset.position === '3'",
        timeout=120000, polling=200)
    assert current_tab(page) == "Step"
    assert step.locator(".pl-step-program").inner_text() == "program (2,)"
    page.screenshot(path=str(results_dir / "lab-compare-open-step.png"))

    # the Compare tab says what happened: stepped, Step tab, Grid tab (made, not yet shown)
    page.locator(".jp-OutputArea .lm-TabBar-tab", has_text=re.compile("^Compare$")).click()
    note = page.locator(".jp-OutputArea .pl-compare .pl-cmp-opened")
    note.wait_for(timeout=30000)
    assert note.inner_text() == ("stepper at program (2,) (3/4 programs run): shown in the "
                                 "Step tab and selected in the Grid tab")

    # ... and it is true of the Grid tab, opened only now
    page.locator(".jp-OutputArea .lm-TabBar-tab", has_text=re.compile("^Grid$")).click()
    grid = page.locator(".jp-OutputArea .pl-grid")
    grid.wait_for(timeout=60000)
    assert grid.get_attribute("data-step") == "2"
    assert grid.locator(".pl-info .pl-program").inner_text() == "program (2,)"
    page.screenshot(path=str(results_dir / "lab-compare-open-grid.png"))
    assert page.requests_attempted == []

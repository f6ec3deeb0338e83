"""The Step tab of a plain `%%pallas` workbench (no `--compare`) in a real JupyterLab (issue 39,
item 1): tutorial 01's own cells, the Step tab opened and ▶ pressed. The programs run in the
worker: the step table fills, with no "programs run in this process" or "cannot pickle".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_jupyterlab import lab, notebook, open_notebook, run_all  # noqa: F401

TUTORIAL = Path(__file__).resolve().parents[2] / "notebooks" / "01_grids_and_blockspecs.ipynb"


def tutorial_cells() -> list[str]:
    """Cells 1 (imports, %load_ext), 3 (the add kernel and its inputs) and 4 (`%%pallas`)."""
    cells = json.loads(TUTORIAL.read_text())["cells"]
    code = ["".join(cells[i]["source"]) for i in (1, 3, 4)]
    assert code[2].startswith("%%pallas") and "--compare" not in code[2]
    return code


def test_step_from_a_plain_pallas_workbench_runs_programs(page, lab, results_dir):  # noqa: F811
    notebook(lab["root"] / "step_plain.ipynb", tutorial_cells())
    open_notebook(page, lab, "step_plain.ipynb")
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()  # more room
    run_all(page)
    page.locator(".jp-OutputArea .pl-grid").wait_for(timeout=180000)  # the cell's own tab

    page.locator(".jp-OutputArea .lm-TabBar-tab", has_text=re.compile("^Step$")).click()
    step = page.locator(".jp-OutputArea .pl-step")
    step.wait_for(timeout=120000)
    assert step.get_attribute("data-position") == "0"
    step.locator("button.pl-step-step").click()
    page.wait_for_function(
        "document.querySelector('.jp-OutputArea .pl-step')?.dataset.position === '1'",
        timeout=120000, polling=200)
    assert step.locator(".pl-step-program").inner_text() == "program (0, 0)"
    assert step.locator(".pl-step-blocks > *").count() > 0  # the step table filled
    assert step.locator(".pl-step-error").count() == 0
    text = step.inner_text()
    assert "in this process" not in text and "cannot pickle" not in text, text
    page.screenshot(path=str(results_dir / "lab-step-plain.png"))
    assert page.requests_attempted == []

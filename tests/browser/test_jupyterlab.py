"""End to end in a real JupyterLab: run a `%%pallas` cell, hover a program, check the blocks.

Starts `jupyter lab` from this environment on a free localhost port with a token, with
private settings/workspace directories; the browser may reach only that server. Screenshots
of the grid view in the light and dark themes go to test-results/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _servers import LAB_QUIET, jupyter_server, write_notebook

TESTS = Path(__file__).resolve().parents[1]

CELLS = [
    f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    "%load_ext pallaslab\n"
    "from kernels import matmul, rand\n"
    "x, y = rand((512, 256)), rand((256, 384), seed=1)",
    "%%pallas --tab grid\n"
    "matmul(x, y, interpret=True)",
]


def notebook(path: Path, cells: list[str] = CELLS) -> None:
    write_notebook(path, cells)


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """One JupyterLab server for every Lab test of the session (test_lab_tabs.py too)."""
    root = tmp_path_factory.mktemp("lab")
    notebook(root / "e2e.ipynb")
    with jupyter_server(root, "lab", LAB_QUIET) as server:
        yield server


def open_notebook(page, lab, name: str) -> None:
    """Open `name` in Lab (only the Lab server reachable) and wait for its kernel."""
    base = lab["base"]
    page.unroute("**/*")
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base)
               else (page.requests_attempted.append(route.request.url), route.abort()))
    page.goto(f"{base}/lab/tree/{name}?token={lab['token']}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60000)
    # the kernel must be up before running (the status bar says so)
    page.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(timeout=60000)


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()


def set_theme(page, name: str) -> None:
    """Switch JupyterLab's theme through its own Settings menu ("JupyterLab Dark"/"Light")."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Settings$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Theme$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{name}$")).click()
    light = "false" if "Dark" in name else "true"
    page.wait_for_selector(f"body[data-jp-theme-light={light}]", timeout=20000,
                           state="attached")


def test_pallas_cell_in_jupyterlab(page, lab, results_dir):
    open_notebook(page, lab, "e2e.ipynb")
    run_all(page)
    grid = page.locator(".jp-OutputArea .pl-grid canvas[data-role=grid]")
    try:
        grid.wait_for(timeout=90000)
    except Exception:
        page.screenshot(path=str(results_dir / "jupyterlab-failure.png"))
        raise
    out = page.locator(".jp-Cell").nth(1)
    # the cell's own value, computed once the workbench is shown (it does not wait for it)
    out.locator(".jp-OutputArea-output", has_text="Array([[").wait_for(timeout=60000)
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()  # more room

    # rows = grid axis 1, cols = grid axis 2 (axis 0 on a slider): hover program (0, 2, 1)
    grid.scroll_into_view_if_needed()
    cell = float(grid.get_attribute("data-cell"))
    box = grid.bounding_box()
    page.mouse.move(box["x"] + 1.5 * cell, box["y"] + 2.5 * cell)
    view = page.locator(".pl-grid")
    assert view.locator(".pl-info .pl-program").inner_text() == "program (0, 2, 1)"
    rows = {r.get_attribute("data-origin"): (r.get_attribute("data-block"),
                                             r.get_attribute("data-copy"))
            for r in view.locator("table.pl-blocks tr[data-origin]").all()}
    # x block (i, k) = (0, 1); y block (k, j) = (1, 2); out block (i, j) = (0, 2), written
    # back at the last k (k=1)
    assert rows == {"args[0]": ("0,1", "fetch"), "args[1]": ("1,2", "fetch"),
                    "outputs": ("0,2", "write")}
    page.screenshot(path=str(results_dir / "jupyterlab-grid-light.png"))
    view.screenshot(path=str(results_dir / "grid-light.png"))

    # the dark theme, through JupyterLab's own command
    set_theme(page, "JupyterLab Dark")
    page.wait_for_timeout(300)
    page.mouse.move(box["x"] + 1.5 * cell, box["y"] + 2.5 * cell)
    bg = page.evaluate("getComputedStyle(document.querySelector('.pl-grid'))"
                       ".getPropertyValue('--pl-bg').trim()")
    assert bg and bg.lower() not in ("#fff", "#ffffff", "white")
    page.screenshot(path=str(results_dir / "jupyterlab-grid-dark.png"))
    view.screenshot(path=str(results_dir / "grid-dark.png"))
    assert page.requests_attempted == []

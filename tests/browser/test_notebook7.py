"""End to end in a real Jupyter Notebook 7: run a `%%pallas` cell, hover a program, check the
blocks, in the light and dark themes (issue 10, deliver item 6).

The widgets use anywidget conventions only, so Notebook 7 (a different app on the same
Lumino/JupyterLab components) must show them as JupyterLab does. Starts `jupyter notebook`
from this environment on a free localhost port with a token and private settings, config and
runtime directories, once for the module; the browser may reach only that server. Screenshots
go to test-results/notebook7-*.png.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from _servers import jupyter_server, write_notebook

TESTS = Path(__file__).resolve().parents[1]

CELLS = [
    f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    "%load_ext pallaslab\n"
    "from kernels import matmul, rand\n"
    "x, y = rand((512, 256)), rand((256, 384), seed=1)",
    "%%pallas --tab grid\n"
    "matmul(x, y, interpret=True)",
]


@pytest.fixture(scope="module")
def nb7(tmp_path_factory):
    """One Notebook 7 server for the module."""
    pytest.importorskip("notebook", reason='Notebook 7: pip install "pallaslab[notebook]"')
    root = tmp_path_factory.mktemp("nb7")
    write_notebook(root / "e2e.ipynb", CELLS)
    with jupyter_server(root, "notebook") as server:
        yield server


def kernel_idle(nb7) -> bool:
    url = f"{nb7['base']}/api/kernels?token={nb7['token']}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            kernels = json.load(r)
    except urllib.error.URLError:  # the server may answer 500 while the kernel starts: ask again
        return False
    return bool(kernels) and all(k["execution_state"] == "idle" for k in kernels)


def open_notebook(page, nb7, name: str) -> None:
    """Open `name` in Notebook 7's own notebook page (`/notebooks/...`, not /lab) and wait for
    its kernel to be idle (asked of the server: Notebook 7 has no Lab status bar)."""
    base = nb7["base"]
    # Notebook 7.6 does not start its kernel session when Playwright intercepts its requests
    # (page.route): the page's requests are watched instead, and any that leaves the server
    # is recorded and fails the test at the end.
    page.unroute("**/*")
    page.on("request", lambda r: None if r.url.startswith((base, "data:", "blob:"))
            else page.requests_attempted.append(r.url))
    page.goto(f"{base}/notebooks/{name}?token={nb7['token']}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60000)
    deadline = time.monotonic() + 90
    while not kernel_idle(nb7):
        assert time.monotonic() < deadline, "the kernel did not start:\n" + (
            nb7["root"] / "nb7.log").read_text()[-3000:]
        time.sleep(0.5)
    # Notebook 7.6's own shortcuts plugin throws once while loading the settings of a plugin
    # it does not have (in notebook_core, before any cell of ours runs): not ours, so set aside.
    # Any page error after this point (our widgets) still fails the test.
    foreign = [e for e in page.errors if e == "Cannot read properties of undefined "
               "(reading 'schema')"]
    page.errors[:] = [e for e in page.errors if e not in foreign]


def menu(page, *path: str) -> None:
    """Click through Notebook 7's menu bar (the same Lumino menus as Lab's)."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{path[0]}$")).click()
    for item in path[1:-1]:
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{path[-1]}$")).click()


def test_pallas_cell_in_notebook7(page, nb7, results_dir):
    open_notebook(page, nb7, "e2e.ipynb")
    # Notebook 7 is its own app, not JupyterLab
    assert "/notebooks/e2e.ipynb" in page.url and "/lab" not in page.url
    menu(page, "Run", "Run All Cells")
    grid = page.locator(".jp-OutputArea .pl-grid canvas[data-role=grid]")
    try:
        grid.wait_for(timeout=90000)
    except Exception:
        page.screenshot(path=str(results_dir / "notebook7-failure.png"))
        raise
    out = page.locator(".jp-Cell").nth(1)
    # the cell's own value, computed once the workbench is shown (it does not wait for it)
    out.locator(".jp-OutputArea-output", has_text="Array([[").wait_for(timeout=60000)

    # rows = grid axis 1, cols = grid axis 2 (axis 0 on a slider): hover program (0, 2, 0)
    grid.scroll_into_view_if_needed()
    cell = float(grid.get_attribute("data-cell"))
    box = grid.bounding_box()
    page.mouse.move(box["x"] + 0.5 * cell, box["y"] + 2.5 * cell)
    view = page.locator(".pl-grid")
    assert view.locator(".pl-info .pl-program").inner_text() == "program (0, 2, 0)"
    rows = {r.get_attribute("data-origin"): (r.get_attribute("data-block"),
                                             r.get_attribute("data-copy"))
            for r in view.locator("table.pl-blocks tr[data-origin]").all()}
    # x block (i, k) = (0, 0) and y block (k, j) = (0, 2) are fetched; the output block
    # (i, j) = (0, 2) stays in VMEM until its write-back at the last k
    assert rows == {"args[0]": ("0,0", "fetch"), "args[1]": ("0,2", "fetch"),
                    "outputs": ("0,2", "revisit")}
    # operands are named by the kernel's own parameters (and the cell's expressions, when the
    # magic passes them): "x_ref (args[0] = x)"
    labels = view.locator("table.pl-blocks tr[data-origin] td.pl-label").all_inner_texts()
    assert [lb.split(" (")[0] for lb in labels] == ["x_ref", "y_ref", "o_ref"]
    assert labels[0].startswith("x_ref (args[0]")
    # the widget fits the notebook: no horizontal overflow of the output area
    area = out.locator(".jp-OutputArea").bounding_box()
    widget = view.bounding_box()
    assert widget["x"] + widget["width"] <= area["x"] + area["width"] + 1
    page.screenshot(path=str(results_dir / "notebook7-grid-light.png"))
    view.screenshot(path=str(results_dir / "notebook7-grid-light-view.png"))

    # the dark theme, through Notebook 7's own Settings > Theme menu
    menu(page, "Settings", "Theme", "JupyterLab Dark")
    page.wait_for_selector("body[data-jp-theme-light=false]", timeout=20000, state="attached")
    page.wait_for_timeout(300)
    page.mouse.move(box["x"] + 0.5 * cell, box["y"] + 2.5 * cell)
    assert view.locator(".pl-info .pl-program").inner_text() == "program (0, 2, 0)"
    bg = page.evaluate("getComputedStyle(document.querySelector('.pl-grid'))"
                       ".getPropertyValue('--pl-bg').trim()")
    assert bg and bg.lower() not in ("#fff", "#ffffff", "white")
    page.screenshot(path=str(results_dir / "notebook7-grid-dark.png"))
    view.screenshot(path=str(results_dir / "notebook7-grid-dark-view.png"))
    menu(page, "Settings", "Theme", "JupyterLab Light")  # settings persist in the module's dir
    page.wait_for_selector("body[data-jp-theme-light=true]", timeout=20000, state="attached")
    assert page.requests_attempted == []

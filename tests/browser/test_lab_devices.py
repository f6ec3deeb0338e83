"""`%%pallas --devices 4` in a real JupyterLab (issue 26, item 3): the workbench of a ring
all-gather inside shard_map describes, in its header and every tab, the kernel each of the 4
simulated devices runs (3 ring steps over an (8, 128) shard), the run its Step tab steps.
Screenshots go to test-results/ (lab-devices-*.png)."""

from __future__ import annotations

import re
from pathlib import Path

from test_jupyterlab import lab, notebook, open_notebook, run_all  # noqa: F401

TESTS = Path(__file__).resolve().parents[1]

CELLS = [
    f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    "%load_ext pallaslab\n"
    "from kernels_multi import ring_all_gather\n"
    "gather, (x,) = ring_all_gather()[:2]",
    "%%pallas --devices 4\n"
    "gather(x)",
]


def _tab(out, title: str):
    out.locator(".lm-TabBar-tab", has_text=re.compile(f"^{title}$")).click()


def test_every_tab_of_a_workbench_on_four_devices_shows_each_devices_kernel(
        browser, lab, results_dir):  # noqa: F811
    notebook(lab["root"] / "devices.ipynb", CELLS)
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.requests_attempted = []
    open_notebook(page, lab, "devices.ipynb")
    run_all(page)
    out = page.locator(".jp-Cell").nth(1)
    header = out.locator(".widget-html.pl-wb-header")  # the live one (not the saved copy)
    header.wait_for(timeout=240000)
    assert "grid 3" in header.inner_text()  # the header: each device's grid, not the trace here
    _tab(out, "Overview")
    overview = out.locator(".pallaslab:visible", has_text="traced on 4 simulated devices")
    overview.wait_for(timeout=60000)
    text = overview.inner_text()
    assert "3 programs" in text and "traced on 4 simulated devices" in text
    overview.screenshot(path=str(results_dir / "lab-devices-overview.png"))
    _tab(out, "Step")
    step = out.locator("button.pl-sd-step:visible")
    step.wait_for(timeout=60000)
    step.click()  # step all devices: each runs its first program of 3
    page.wait_for_function(  # every device's row: "1/3" programs
        "() => [...document.querySelectorAll('table.pl-sd-devices tr[data-device]')]"
        ".filter(r => r.offsetParent !== null && r.innerText.includes('/3')).length === 4",
        timeout=180000, polling=500)
    out.screenshot(path=str(results_dir / "lab-devices-step.png"))
    # issue 39 item 4: one line, one name: the Step tables and the Devices table name the
    # notebook's lines as its tracebacks do ("Cell In[2]:16"), the same in both tabs
    sources = ("(sel) => [...document.querySelectorAll(sel)].filter(r => r.offsetParent !== null)"
               ".map(r => r.lastElementChild.textContent)")
    stepped = set(page.evaluate(sources, "table.pl-sd-transfers tr:not(:first-child),"
                                " table.pl-sd-inflight tr:not(:first-child)"))
    _tab(out, "Devices")
    out.locator("table.pl-devices-table:visible").wait_for(timeout=180000)
    recorded = set(page.evaluate(sources, "table.pl-devices-table tr[data-step]"))
    out.screenshot(path=str(results_dir / "lab-devices-devices.png"))
    assert stepped and recorded, (stepped, recorded)
    assert not any("dynamic-code" in s for s in stepped | recorded), (stepped, recorded)
    assert stepped <= recorded, (stepped, recorded)
    context.close()
    assert page.requests_attempted == []

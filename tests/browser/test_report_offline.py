"""The report opened in Chromium with every network request blocked."""

from __future__ import annotations

from pathlib import Path

from pallaslab.cli import main

KERNELS = Path(__file__).parents[1] / "kernels.py"


def test_report_is_interactive_offline(page, tmp_path, results_dir):
    out = tmp_path / "report.html"
    assert main(["report", f"{KERNELS}:two_kernels", "-o", str(out)]) == 0
    page.allowed.add(out.as_uri())
    page.goto(out.as_uri())
    page.wait_for_selector("#pl-root[data-ready=true]", timeout=20000)
    # only the file itself was loaded: blob: module imports are not network requests
    assert [u for u in page.requests_attempted if u != out.as_uri()] == []
    sections = page.locator("section.pl-kernel")
    assert sections.count() == 2
    first = sections.first
    canvas = first.locator("canvas[data-role=grid]")
    cell = float(canvas.get_attribute("data-cell"))
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + 1.5 * cell, box["y"] + 0.5 * cell)  # matmul program (0, 0, 1)
    assert first.locator(".pl-info .pl-program").inner_text() == "program (0, 0, 1)"
    rows = first.locator("table.pl-blocks tr[data-origin]")
    assert rows.nth(0).get_attribute("data-block") == "0,1"  # args[0] -> (i, k)
    assert rows.nth(0).get_attribute("data-copy") == "fetch"
    # the output stays in VMEM over k and is written back at the last k (k=1 here)
    assert rows.nth(2).get_attribute("data-copy") == "write"
    # the other tab of a kernel mounts on click
    first.locator(".pl-tabs button[data-tab=overview]").click()
    pane = first.locator(".pl-pane[data-tab=overview]")
    pane.get_by_text("matmul_kernel").first.wait_for(timeout=10000)  # modules mount async
    assert "matmul_kernel" in pane.inner_text()
    page.screenshot(path=str(results_dir / "report-light.png"), full_page=True)
    page.click("#pl-theme")
    page.wait_for_function("document.body.classList.contains('pl-dark')")
    page.screenshot(path=str(results_dir / "report-dark.png"), full_page=True)

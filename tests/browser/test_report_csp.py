"""The report's Content-Security-Policy in a real Chromium: its own views mount and work,
while markup injected into the file cannot run script or reach the network."""

from __future__ import annotations

import time

from kernels import CATALOG

import pallaslab

# Collects CSP violations from the first moment of the page (init scripts are injected by the
# browser's DevTools protocol, so the page's own policy does not apply to them).
LISTEN = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(
  {directive: e.effectiveDirective, blocked: e.blockedURI, sample: e.sample}));
"""
INJECTED = ('<script>window.__pwned = 1</script>'
            '<img src=x onerror="window.__pwned_img = 1">')


def report_file(tmp_path, *, inject: bool):
    fn, args = CATALOG["matmul_f32"].case()
    html = pallaslab.Workbench(pallaslab.capture(fn, *args)).report(title="csp")
    if inject:  # what a hostile string would be if it ever escaped the HTML escaping
        body = '<body class="pl-report">'
        assert html.count(body) == 1
        html = html.replace(body, body + INJECTED)
    out = tmp_path / ("injected.html" if inject else "report.html")
    out.write_text(html, encoding="utf-8")
    return out


def open_report(page, path):
    page.add_init_script(LISTEN)
    console = []
    page.on("console", lambda m: console.append(m.text))
    page.allowed.add(path.as_uri())
    page.goto(path.as_uri())
    page.wait_for_selector("#pl-root[data-ready=true]", timeout=20000)
    return console


def wait_until(page, expression: str, timeout: float = 5.0) -> None:
    """Poll from Python: page.wait_for_function evaluates a string in the page, which this
    policy (rightly) forbids."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        page.wait_for_timeout(50)


def hover_program_0_0_1(page):
    first = page.locator("section.pl-kernel").first
    canvas = first.locator("canvas[data-role=grid]")
    cell = float(canvas.get_attribute("data-cell"))
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + 1.5 * cell, box["y"] + 0.5 * cell)
    assert first.locator(".pl-info .pl-program").inner_text() == "program (0, 0, 1)"
    rows = first.locator("table.pl-blocks tr[data-origin]")
    assert rows.nth(0).get_attribute("data-block") == "0,1"  # args[0] -> (i, k)


def test_views_mount_under_the_policy_without_a_violation(page, tmp_path):
    path = report_file(tmp_path, inject=False)
    console = open_report(page, path)
    hover_program_0_0_1(page)
    # every other tab imports its module (a blob: URL) on click, under the same policy, and
    # draws without an inline style or script the policy would refuse
    first = page.locator("section.pl-kernel").first
    tabs = first.locator(".pl-tabs button").evaluate_all("(bs) => bs.map((b) => b.dataset.tab)")
    assert {"overview", "grid", "memory", "pipeline", "lowering"} <= set(tabs)
    for tab in tabs:
        first.locator(f".pl-tabs button[data-tab={tab}]").click()
        first.locator(f".pl-pane[data-tab={tab}] > *").first.wait_for(timeout=10000)
    overview = first.locator(".pl-pane[data-tab=overview]")
    assert "matmul_kernel" in overview.text_content()
    assert page.evaluate("window.__violations") == []
    assert not [m for m in console if "Content Security Policy" in m]
    assert page.requests_attempted == [path.as_uri()]


def test_injected_script_and_handler_do_not_run(page, tmp_path):
    path = report_file(tmp_path, inject=True)
    console = open_report(page, path)
    hover_program_0_0_1(page)  # the report's own script still runs and works
    assert page.evaluate("typeof window.__pwned") == "undefined"  # ran at parse time, if ever
    # the img's error fires once its load is refused; give its handler every chance to run
    wait_until(page, "window.__violations.some((v) => v.directive === 'script-src-attr')")
    assert page.evaluate("typeof window.__pwned_img") == "undefined"
    violations = page.evaluate("window.__violations")
    refused = {(v["directive"], v["blocked"]) for v in violations}
    assert ("script-src-elem", "inline") in refused  # the injected <script>
    assert ("script-src-attr", "inline") in refused  # the onerror= handler
    # the image itself is refused too (Chromium reports a file: URL by its scheme alone)
    assert any(v["directive"] == "img-src" and v["blocked"].startswith("file") for v in violations)
    # Chromium says so on the console too ("Executing inline script violates ..." in recent
    # versions, "Refused to execute inline script ..." in older ones)
    csp_errors = [m for m in console if "Content Security Policy" in m]
    assert any("inline script" in m for m in csp_errors), console
    assert any("inline event handler" in m for m in csp_errors), console
    # nothing left the page: the refused image was never requested, and no module was fetched
    assert page.requests_attempted == [path.as_uri()]

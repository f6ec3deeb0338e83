"""The workbench's tabs inside a real JupyterLab, in the light and dark themes (issue 10).

One Lab server (test_jupyterlab.py's session fixture) and one notebook serve every test here:
the notebook is run once in the light theme, then run again after switching to JupyterLab
Dark, so each view is also *first drawn* in dark. Checked in both themes: a tab stays within
the notebook's width and stops changing once drawn, the renderer goes idle, timelines show
their events, no ANSI escape reaches the page, the jaxpr stage links Python lines, and
re-selecting the Lowering target is answered. Screenshots go to test-results/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_jupyterlab import lab, notebook, open_notebook, run_all, set_theme  # noqa: F401

TESTS = Path(__file__).resolve().parents[1]

CELLS = [
    f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    "%load_ext pallaslab\n"
    "import pallaslab\n"
    "from kernels import matmul, rand\n"
    "x, y = rand((512, 256)), rand((256, 384), seed=1)",
    "%%pallas --tab pipeline\n"
    "matmul(x, y, interpret=True)",
    "%%pallas --tab lowering\n"
    "matmul(x, y, interpret=True)",
    "wb = pallaslab.inspect(lambda a, b: matmul(a, b, interpret=True), x, y)\n"
    "wb.profile()",
]
THEMES = ("JupyterLab Light", "JupyterLab Dark")


@pytest.fixture(scope="module")
def lab_page(browser, lab):  # noqa: F811
    """One page on one notebook for the whole module; `run(theme)` runs it in a theme."""
    notebook(lab["root"] / "tabs.ipynb", CELLS)
    context = browser.new_context(viewport={"width": 1440, "height": 1100})
    pg = context.new_page()
    pg.requests_attempted = []
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    open_notebook(pg, lab, "tabs.ipynb")
    # more room for the notebook: close the file browser
    pg.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()
    pg.theme = None

    def run(theme: str) -> None:
        if pg.theme == theme:
            return
        set_theme(pg, theme)
        run_all(pg)
        # every output drawn: the pipeline canvases (two views), the lowering IR
        pg.wait_for_function(
            "document.querySelectorAll('.jp-OutputArea .pl-pipeline canvas').length >= 3"
            " && document.querySelector('.jp-OutputArea .pl-lowering .pl-code[data-role=ir]')"
            " && document.querySelectorAll('.jp-Cell')[3].querySelector('.pl-pipeline')",
            timeout=180000, polling=250)
        pg.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(timeout=120000)
        pg.wait_for_timeout(500)
        pg.theme = theme

    pg.run = run
    yield pg
    context.close()
    assert not pg.errors, pg.errors
    assert pg.requests_attempted == []


@pytest.fixture(scope="module", params=THEMES)
def theme(request):
    """Module-scoped, so pytest runs every light test, then every dark one (one re-run)."""
    return request.param


def cell(page, i: int):
    return page.locator(".jp-Cell").nth(i)


def slug(theme: str) -> str:
    return "dark" if "Dark" in theme else "light"


WIDTHS = """([i, cls]) => {
  const view = document.querySelectorAll('.jp-Cell')[i].querySelector(cls);
  const area = view.closest('.jp-OutputArea');
  return [view.getBoundingClientRect().width, view.scrollWidth,
          area.getBoundingClientRect().width];
}"""


@pytest.mark.parametrize("view", ["pipeline", "lowering"])
def test_tab_stays_within_the_notebook_and_stops_resizing(lab_page, theme, view, results_dir):
    page = lab_page
    page.run(theme)
    index = 1 if view == "pipeline" else 2
    loc = cell(page, index).locator(f".pl-{view}")
    loc.evaluate("e => e.scrollIntoView({block: 'start'})")  # a growing view is never "stable"
    samples = []
    for _ in range(6):  # ~2 s
        samples.append(page.evaluate(WIDTHS, [index, f".pl-{view}"]))
        page.wait_for_timeout(400)
    widths = [round(w) for w, _, _ in samples]
    assert len(set(widths)) == 1, f"{view} keeps resizing: {widths}"
    width, scroll, area = samples[-1]
    assert width <= area, f"{view} is {width:.0f} px wide in a {area:.0f} px output area"
    assert scroll <= width + 1, f"{view} content overflows: {scroll} > {width}"
    if view == "lowering":
        # the Python pane and the resources table are on screen, long IR lines scroll inside
        for part in (".pl-py-pane", ".pl-resources", ".pl-ir-pane"):
            box = loc.locator(part).bounding_box()
            assert box and box["x"] + box["width"] <= page.viewport_size["width"], part
        ir = loc.locator(".pl-code[data-role=ir]")
        assert ir.evaluate("e => e.clientWidth") <= width
    loc.screenshot(path=str(results_dir / f"lab-{view}-{slug(theme)}.png"))


def test_renderer_is_idle_once_drawn(lab_page, theme):
    page = lab_page
    page.run(theme)
    cell(page, 1).locator(".pl-pipeline").evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)
    # count animation frames that changed the layout over one second: none when idle
    changes = page.evaluate("""() => new Promise((done) => {
      const views = [...document.querySelectorAll('.jp-OutputArea .pallaslab')];
      const size = () => views.map((v) => `${v.getBoundingClientRect().width}x${v.scrollWidth}`)
        .join(',');
      let last = size(), changed = 0, frames = 0;
      const ro = new ResizeObserver(() => { changed++; });
      views.forEach((v) => ro.observe(v));
      const t0 = performance.now();
      const tick = () => {
        frames++;
        const now = size();
        if (now !== last) { changed++; last = now; }
        if (performance.now() - t0 < 1000) requestAnimationFrame(tick);
        else { ro.disconnect(); done({changed, frames}); }
      };
      requestAnimationFrame(tick);
    })""")
    # the observer's first call reports the current sizes: one per view, no more
    views = page.evaluate("document.querySelectorAll('.jp-OutputArea .pallaslab').length")
    assert changes["changed"] <= views, changes


def _track_pixels(page, canvas) -> dict:
    """Distinct colours in the plot area of a timeline canvas, and the lane background's."""
    return canvas.evaluate("""(c) => {
      const ctx = c.getContext('2d');
      const lw = Number(c.dataset.labelWidth) * devicePixelRatio;
      const img = ctx.getImageData(lw, 0, c.width - lw, c.height).data;
      const colours = new Map();
      for (let i = 0; i < img.length; i += 4) {
        if (img[i + 3] === 0) continue;
        const k = `${img[i]},${img[i + 1]},${img[i + 2]}`;
        colours.set(k, (colours.get(k) || 0) + 1);
      }
      const bg = getComputedStyle(c.closest('.pallaslab')).getPropertyValue('--pl-bg2').trim();
      const acc = getComputedStyle(c.closest('.pallaslab')).getPropertyValue('--pl-accent').trim();
      return {n: colours.size, top: [...colours.entries()].sort((a, b) => b[1] - a[1])
        .slice(0, 6), bg, acc};
    }""")


def test_timelines_first_drawn_in_the_theme_show_their_events(lab_page, theme, results_dir):
    page = lab_page
    page.run(theme)
    for i, name in ((1, "pipeline"), (3, "profile")):
        view = cell(page, i).locator(".pl-pipeline")
        view.evaluate("e => e.scrollIntoView({block: 'start'})")
        canvases = view.locator("canvas.pl-pipe-canvas").all()
        assert canvases
        for canvas in canvases:
            px = _track_pixels(page, canvas)
            # lane background, events (copy-in / compute / write-back colours), axis text:
            # not one solid grey
            assert px["n"] >= 4, (name, px)
            rgb = [tuple(map(int, k.split(","))) for k, _ in px["top"]]
            coloured = [c for c in rgb if max(c) - min(c) > 40]  # not a grey
            assert coloured, (name, theme, px)
        view.screenshot(path=str(results_dir / f"lab-{name}-first-{slug(theme)}.png"))


def test_jaxpr_stage_has_no_escapes_and_links_python(lab_page, theme):
    page = lab_page
    page.run(theme)
    view = cell(page, 2).locator(".pl-lowering")
    view.locator("select.pl-stage").select_option("jaxpr")
    page.wait_for_function("document.querySelectorAll('.jp-Cell')[2]"
                           ".querySelector('.pl-lowering').dataset.stage === 'jaxpr'",
                           timeout=60000)
    ir = view.locator(".pl-code[data-role=ir]")
    ir.wait_for()
    text = page.evaluate("document.querySelector('.jp-Notebook').innerText")
    assert "\x1b" not in text and "[35m" not in text and "<U+001B>" not in text
    assert "no Python locations" not in view.inner_text()
    assert ir.locator(".pl-line.pl-mapped").count() > 0
    # clicking a mapped jaxpr line lights its Python line
    ir.locator(".pl-line.pl-mapped").first.click()
    assert view.locator(".pl-code[data-role=py] .pl-line.pl-hl").count() >= 1
    view.locator("select.pl-stage").select_option("mosaic")


def test_reselecting_the_current_target_is_answered(lab_page, theme):
    page = lab_page
    page.run(theme)
    view = cell(page, 2).locator(".pl-lowering")
    target = view.get_attribute("data-target")
    # the shown target picked again (the change event a select fires on re-pick), then
    # another target and straight back, as fast as a user clicks
    view.locator("select.pl-target").evaluate(
        "(s) => { s.value = s.value; s.dispatchEvent(new Event('change')); }")
    view.locator("select.pl-target").select_option("gpu-h100")
    view.locator("select.pl-target").select_option(target)
    page.wait_for_function(
        f"(() => {{ const v = document.querySelectorAll('.jp-Cell')[2]"
        f".querySelector('.pl-lowering');"
        f" return v.dataset.target === {target!r} && !v.querySelector('.pl-pending'); }})()",
        timeout=120000)
    assert not view.locator(".pl-banner").count(), view.inner_text()
    assert re.search(r"mosaic-tpu · ok", view.inner_text())

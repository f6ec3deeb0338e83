"""Widget speed in real Chromium (Debian's, via Playwright): prints figures and goals.

Standalone grid view (a harness page, no Jupyter):
- first paint of the grid view for a 1024 x 1024 grid (1,048,576 programs): the synchronous
  `render()` and render -> second animation frame (the browser has painted);
- hover-to-highlight latency: one `mousemove` over the grid canvas until the highlights and
  the block table are updated (the handler draws synchronously), median and p95 of 300;
- payload bytes of that view (JSON + binary buffers), and for JAX's TPU flash attention;
- `report.html` size for JAX's TPU flash attention (causal, 2 x 8 x 2048 x 128).
Goals (issue 3): first paint < 500 ms, hover < 16 ms, payload < 8 MB, report < 5 MB.

Inside a real JupyterLab (issue 10), started here and stopped at the end (`_lab_widgets.py`
says how each is measured): `%%pallas` run -> workbench drawn on a 1024 x 1024 matmul (cold,
and the median of five warm re-runs with the kernel's share), each tab's first build, hover in
Lab (dispatched and real pointer), and the renderer's CPU idle on the Pipeline tab.
Goals (issue 10): run -> drawn < 1.5 s (warm), tab first build < 300 ms, hover < 16 ms,
Pipeline tab idle (no frames; CPU as Lab alone).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_widgets.py [--no-lab | --lab-only]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "browser")]

from _lab_widgets import lab_figures, lab_rows  # noqa: E402  (the in-Lab figures)

import pallaslab  # noqa: E402
from pallaslab.views.grid import payload_nbytes  # noqa: E402

MB = 1_000_000


def million_program_view():
    from kernels import elementwise_2d

    x = jax.ShapeDtypeStruct((1024 * 8, 1024 * 128), jnp.float32)
    return pallaslab.inspect(lambda a, b: elementwise_2d(a, b, block=(8, 128)), x, x).grid()


def flash_attention_workbench():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    s = jax.ShapeDtypeStruct((2, 8, 2048, 128), jnp.float32)
    return pallaslab.inspect(lambda q, k, v: fa.flash_attention(q, k, v, causal=True), s, s, s)


HOVER_JS = """(n) => {
  const c = document.querySelector('canvas[data-role=grid]');
  const r = c.getBoundingClientRect();
  const times = [];
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  for (let i = 0; i < n; i++) {
    const x = r.left + rand() * r.width, y = r.top + rand() * r.height;
    const t0 = performance.now();
    c.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));
    times.push(performance.now() - t0);
  }
  return times;
}"""

PAINT_JS = """() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(
  () => done(performance.now() - window.renderStart))))"""


def standalone_rows() -> tuple[str, list[tuple]]:
    from _chromium import launch
    from harness import harness_html
    from playwright.sync_api import sync_playwright

    t0 = time.perf_counter()
    view = million_program_view()
    payload = view.payload()
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    wb = flash_attention_workbench()
    fa_payload = payload_nbytes(wb.grid().payload())
    report = wb.report("flash_attention causal 2x8x2048x128").encode()
    report_s = time.perf_counter() - t0

    html = harness_html("grid.js", payload).replace(
        "const t0 = performance.now();", "const t0 = performance.now(); window.renderStart = t0;")
    with sync_playwright() as p:
        browser = launch(p)
        paints, renders, hovers = [], [], []
        for _ in range(5):
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.route("**/*", lambda route: route.abort())
            page.set_content(html)
            page.wait_for_function("window.ready === true", timeout=60000)
            renders.append(page.evaluate("window.firstPaintMs"))
            paints.append(page.evaluate(PAINT_JS))
            hovers += page.evaluate(HOVER_JS, 300)[20:]  # drop the JIT warm-up
            page.close()
        browser.close()

    hover_med = statistics.median(hovers)
    hover_p95 = sorted(hovers)[int(0.95 * len(hovers))]
    rows = [
        ("grid payload, 1024 x 1024 grid", f"{payload_nbytes(payload):,} B", "< 8 MB",
         payload_nbytes(payload) / (8 * MB)),
        ("grid payload, flash attention", f"{fa_payload:,} B", "< 8 MB", fa_payload / (8 * MB)),
        ("render(), 1024 x 1024 (median of 5)", f"{statistics.median(renders):.1f} ms", "",
         None),
        ("first paint, 1024 x 1024 (median of 5)", f"{statistics.median(paints):.1f} ms",
         "< 500 ms", statistics.median(paints) / 500),
        ("hover -> highlight, median", f"{hover_med:.2f} ms", "< 16 ms", hover_med / 16),
        ("hover -> highlight, p95", f"{hover_p95:.2f} ms", "< 16 ms", hover_p95 / 16),
        ("report.html, flash attention", f"{len(report):,} B", "< 5 MB", len(report) / (5 * MB)),
    ]
    note = (f"Python: 1M-program view payload built in {build_s:.2f} s; flash attention "
            f"capture + report in {report_s:.2f} s")
    return note, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-lab", action="store_true", help="only the standalone figures")
    parser.add_argument("--lab-only", action="store_true", help="only the in-Lab figures")
    opts = parser.parse_args()

    from _chromium import launch
    from playwright.sync_api import sync_playwright

    notes, rows = [], []
    if not opts.lab_only:
        note, standalone = standalone_rows()
        notes.append(note)
        rows += standalone
    if not opts.no_lab:
        with sync_playwright() as p:
            browser = launch(p)
            try:
                figures = lab_figures(browser)
            finally:
                browser.close()
        rows += lab_rows(figures)
        pipe = figures["idle_pipeline"]
        (w0, s0), (w1, s1) = pipe["widths"]
        runs = figures["runs"]
        notes.append("Lab: %%pallas run -> grid painted, ms (kernel share): cold "
                     + "; warm ".join(f"{r['total']:.0f} ({r.get('kernel', float('nan')):.0f})"
                                      for r in runs))
        notes.append(f"Lab: started and notebook open in {figures['lab_start_s']:.1f} s; "
                     f"Pipeline view {w0:.0f} -> {w1:.0f} px wide (scroll {s0} -> {s1}) over "
                     f"the idle window; hover updates after the event: "
                     f"{figures['hover']['late']} late, {figures['hover']['missed']} missed; real "
                     f"pointer moves that changed the program shown: "
                     f"{figures['pointer']['changed']} of 60; "
                     f"page errors: {len(figures['errors'])}; blocked requests: "
                     f"{len(figures['requests'])}")
        for e in figures["errors"]:
            notes.append(f"  page error: {e}")
    for note in notes:
        print(note)
    print(f"{'measure':56} {'value':>16}  {'goal':>9}  {'of goal':>8}")
    for name, value, goal, ratio in rows:
        share = ("" if ratio is None else ratio if isinstance(ratio, str)
                 else f"{100 * ratio:7.1f}%")
        print(f"{name:56} {value:>16}  {goal:>9}  {share:>8}")


if __name__ == "__main__":
    main()

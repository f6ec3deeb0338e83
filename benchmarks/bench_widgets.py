"""Grid widget speed in real Chromium (Debian's, via Playwright): prints figures and goals.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/bench_widgets.py

- first paint of the grid view for a 1024 x 1024 grid (1,048,576 programs): the synchronous
  `render()` and render -> second animation frame (the browser has painted);
- hover-to-highlight latency: one `mousemove` over the grid canvas until the highlights and
  the block table are updated (the handler draws synchronously), median and p95 of 300;
- payload bytes of that view (JSON + binary buffers), and for JAX's TPU flash attention;
- `report.html` size for JAX's TPU flash attention (causal, 2 x 8 x 2048 x 128).
Goals (issue 3): first paint < 500 ms, hover < 16 ms, payload < 8 MB, report < 5 MB.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "browser")]

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


def main() -> None:
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
    print(f"Python: 1M-program view payload built in {build_s:.2f} s; flash attention "
          f"capture + report in {report_s:.2f} s")
    print(f"{'measure':42} {'value':>16}  {'goal':>9}  {'of goal':>8}")
    for name, value, goal, ratio in rows:
        share = "" if ratio is None else f"{100 * ratio:7.1f}%"
        print(f"{name:42} {value:>16}  {goal:>9}  {share:>8}")


if __name__ == "__main__":
    main()

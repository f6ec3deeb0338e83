"""The in-Lab figures of `bench_widgets.py` (issue 10). A real JupyterLab is started here on
127.0.0.1 with private settings and stopped at the end; the browser reaches only that server:
- `%%pallas` on a 1024 x 1024 f32 matmul (tests/kernels.py `matmul`, 128 blocks,
  interpret=True): from the run command (the Ctrl+Enter keydown) to the workbench's grid
  canvas painted (drawn, then one more frame); the first run in a fresh kernel (cold) and the
  median of five re-runs (warm), with the kernel's own share (the cell's time in Python);
- a tab's first build: click Grid, Memory, Pipeline, Step, Lowering in a workbench opened on
  its Overview tab, time from the pointerdown to the tab's view having content (no pending
  note, its canvases drawn) and painted;
- hover in Lab: a `mousemove` dispatched on the workbench's grid canvas until the info panel
  shows the hovered program (timed in the page with performance.now()), median and p95 of 50;
  also real pointer input (Playwright's mouse): the grid's mousemove handler, and the delay
  from the event's timestamp to its end (Chrome aligns mousemoves to animation frames);
- the renderer's CPU while idle on the Pipeline tab: main-thread task and script time per
  second (Chrome DevTools Protocol `Performance.getMetrics`, over 3 s) and the page's
  requestAnimationFrame callbacks per second, beside the same figures for Lab alone.
Goals (issue 10): run -> drawn < 1.5 s (warm), tab first build < 300 ms, hover < 16 ms,
Pipeline tab idle (no frames; CPU as Lab alone).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the callers put tests/ and tests/browser on the path


TIMES_FILE = "kernel-times.jsonl"  # in the Lab root: each cell's time in the kernel
LAB_TABS = ("Grid", "Memory", "Pipeline", "Step", "Lowering")
RUN_CELL, TABS_CELL = 1, 2
WARM_RUNS = 5


def lab_cells(root: Path) -> list[str]:
    times = str(root / TIMES_FILE)
    return [
        f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "import json, time\n"
        "def _bench_pre(info):\n"
        "    global _bench_t0\n"
        "    _bench_t0 = time.perf_counter()\n"
        "def _bench_post(result):\n"
        f"    with open({times!r}, 'a') as f:\n"
        "        f.write(json.dumps({'cell': result.info.raw_cell[:40],\n"
        "                            's': time.perf_counter() - _bench_t0}) + '\\n')\n"
        "_bench_t0 = time.perf_counter()\n"
        "get_ipython().events.register('pre_run_cell', _bench_pre)\n"
        "get_ipython().events.register('post_run_cell', _bench_post)\n"
        "%load_ext pallaslab\n"
        "from kernels import matmul, rand\n"
        "x, y = rand((1024, 1024)), rand((1024, 1024), seed=1)\n"
        "x.block_until_ready(); y.block_until_ready();",
        "%%pallas --tab grid\nmatmul(x, y, interpret=True)",
        "%%pallas --tab overview\nmatmul(x, y, interpret=True)",
    ]


@contextlib.contextmanager
def jupyter_lab(root: Path) -> Iterator[dict]:
    """`jupyter lab` on 127.0.0.1 (the browser tests' server: private settings, no news,
    update check or PyPI extension manager), stopped on exit (it shuts its kernels down)."""
    from _servers import LAB_QUIET, jupyter_server

    with jupyter_server(root, "lab", LAB_QUIET) as server:
        yield server


# Counts the page's requestAnimationFrame callbacks (Lab's own and the widgets').
RAF_COUNTER = """(() => {
  const raf = window.requestAnimationFrame.bind(window);
  window.__plRafs = 0;
  window.requestAnimationFrame = (cb) => raf((t) => { window.__plRafs++; cb(t); });
})()"""

# `root`'s canvases drawn: some pixel of one of them is not transparent (no canvas: drawn).
DRAWN = """const drawn = (root) => {
  const all = [...root.querySelectorAll('canvas')];
  if (!all.length) return true;
  return all.some((c) => {
    if (!c.width || !c.height) return false;
    const ctx = c.getContext('2d');
    if (!ctx) return true;
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 4) if (d[i]) return true;
    return false;
  });
};"""

# Arms the measure of one run of cell `i`: t0 = the Ctrl+Enter keydown's timestamp; `painted`
# = the frame after the one in which a new grid canvas of that cell is drawn.
RUN_ARM = """(i) => {
  /*DRAWN*/
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
  const old = new Set(cell.querySelectorAll('canvas'));
  const m = window.__plRun = {t0: null, inserted: null, painted: null};
  const onKey = (e) => {
    if (e.key === 'Enter' && e.ctrlKey && m.t0 === null) m.t0 = e.timeStamp;
  };
  document.addEventListener('keydown', onKey, true);
  const find = () => [...cell.querySelectorAll('.jp-OutputArea canvas[data-role=grid]')]
    .find((c) => !old.has(c));
  const mo = new MutationObserver(() => {
    const c = find();
    if (!c) return;
    mo.disconnect();
    m.inserted = performance.now();
    const tick = () => {
      if (c.isConnected && drawn(c.parentElement)) requestAnimationFrame(() => {
        m.painted = performance.now();
        document.removeEventListener('keydown', onKey, true);
      });
      else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  mo.observe(cell, {childList: true, subtree: true});
}""".replace("/*DRAWN*/", DRAWN)

# Arms the measure of a tab's first build in cell `i`'s workbench: t0 = the pointerdown on
# the tab; `content` = its pane's view has children, no pending note and its canvases drawn;
# `painted` = the frame after.
TAB_ARM = """([i, label]) => {
  /*DRAWN*/
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
  const tabs = [...cell.querySelectorAll('.widget-tab-bar .lm-TabBar-tab')];
  const k = tabs.findIndex((t) => t.textContent.trim() === label);
  const panel = cell.querySelector('.widget-tab-contents').children[k];
  const m = window.__plTab = {k, t0: null, first: null, content: null, painted: null,
                              built: panel.querySelector('.pallaslab') !== null};
  const onDown = (e) => { if (m.t0 === null && tabs[k].contains(e.target)) m.t0 = e.timeStamp; };
  document.addEventListener('pointerdown', onDown, true);
  document.addEventListener('mousedown', onDown, true);
  const ready = () => {
    const r = panel.querySelector('.pallaslab');
    if (!r || !r.childElementCount) return null;
    if (m.first === null) m.first = performance.now();
    return r.getBoundingClientRect().height > 0 && !r.querySelector('.pl-pending') ? r : null;
  };
  const tick = () => {
    const r = ready();
    if (r && drawn(r)) {
      m.content = performance.now();
      requestAnimationFrame(() => {
        m.painted = performance.now();
        document.removeEventListener('pointerdown', onDown, true);
        document.removeEventListener('mousedown', onDown, true);
      });
    } else requestAnimationFrame(tick);
  };
  const mo = new MutationObserver(() => { if (ready()) { mo.disconnect(); tick(); } });
  mo.observe(panel, {childList: true, subtree: true});
}""".replace("/*DRAWN*/", DRAWN)

# Hover in Lab: `n` mousemoves over distinct programs of cell `i`'s grid canvas, each timed
# from just before the event to the info panel showing the new program (synchronously, or
# else when it changes).
LAB_HOVER_JS = """async ([i, n]) => {
  const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i]
    .querySelector('canvas[data-role=grid]');
  const view = c.closest('.pallaslab');
  const info = () => { const p = view.querySelector('.pl-info .pl-program');
                       return p ? p.textContent : null; };
  const size = Number(c.dataset.cell), rows = Number(c.dataset.rows),
    cols = Number(c.dataset.cols);
  const r = c.getBoundingClientRect();
  const times = [];
  let seed = 12345, prev = -1, late = 0, missed = 0;
  const rand = () => (seed = (seed * 1103515245 + 12345) %% 2147483648) / 2147483648;
  for (let h = 0; h < n; h++) {
    let at = prev;
    while (at === prev) at = Math.floor(rand() * rows * cols);
    prev = at;
    const x = r.left + (at %% cols + 0.5) * size, y = r.top + (Math.floor(at / cols) + 0.5) * size;
    const before = info();
    const t0 = performance.now();
    c.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));
    if (info() === before) {
      late++;
      const ok = await new Promise((done) => {
        const mo = new MutationObserver(() => {
          if (info() !== before) { mo.disconnect(); done(true); }
        });
        mo.observe(view, {childList: true, subtree: true, characterData: true});
        setTimeout(() => { mo.disconnect(); done(false); }, 2000);
      });
      if (!ok) { missed++; continue; }
    }
    times.push(performance.now() - t0);
  }
  c.dispatchEvent(new MouseEvent('mouseleave', {bubbles: false}));
  return {times, late, missed};
}""".replace("%%", "%")

# Real pointer input (Playwright's mouse): per mousemove on cell `i`'s grid canvas, its
# handler's time (a capture listener on the canvas to a bubbling one on the view, which runs
# after the canvas' own) and the delay from the event's timestamp to that handler's end
# (Chrome delivers mousemoves aligned to animation frames, so up to a frame of that is wait).
POINTER_ARM = """(i) => {
  const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[i]
    .querySelector('canvas[data-role=grid]');
  const view = c.closest('.pallaslab');
  const m = window.__plPointer = {handler: [], input: [], start: null, stamp: null,
                                  changed: 0};
  const info = () => { const p = view.querySelector('.pl-info .pl-program');
                       return p ? p.textContent : null; };
  let last = info();
  c.addEventListener('mousemove', (e) => { m.start = performance.now(); m.stamp = e.timeStamp; },
                     true);
  view.addEventListener('mousemove', () => {
    if (m.start === null) return;
    const now = performance.now();
    m.handler.push(now - m.start);
    m.input.push(now - m.stamp);
    m.start = null;
    if (info() !== last) { m.changed++; last = info(); }
  });
  const r = c.getBoundingClientRect();
  return {x: r.left, y: r.top, cell: Number(c.dataset.cell), rows: Number(c.dataset.rows),
          cols: Number(c.dataset.cols)};
}"""


def _wait_idle(page, i: int, timeout: float = 300) -> None:
    """Cell `i` has run: its prompt has a number (not `*`) and the kernel says Idle."""
    page.wait_for_function(
        "(i) => /\\[\\d+\\]/.test(document.querySelectorAll('.jp-Notebook .jp-Cell')[i]"
        ".querySelector('.jp-InputPrompt').textContent)", arg=i, timeout=timeout * 1000,
        polling=100)
    page.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(
        timeout=timeout * 1000)


def _run_cell(page, i: int) -> None:
    page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".jp-InputPrompt").click()
    page.keyboard.press("Control+Enter")


def _kernel_times(root: Path) -> list[float]:
    path = root / TIMES_FILE
    if not path.exists():
        return []
    return [json.loads(line)["s"] for line in path.read_text().splitlines() if line.strip()]


def _idle_cpu(page, cdp, seconds: float = 3.0) -> dict:
    """Main-thread CPU (ms per s) and requestAnimationFrame callbacks per s over `seconds`."""
    def metrics() -> dict:
        return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}

    a, rafs_a = metrics(), page.evaluate("window.__plRafs")
    time.sleep(seconds)
    b, rafs_b = metrics(), page.evaluate("window.__plRafs")
    dt = b["Timestamp"] - a["Timestamp"]
    per_s = {k: 1000 * (b[k] - a[k]) / dt for k in
             ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")}
    return {**per_s, "rafs": (rafs_b - rafs_a) / dt, "seconds": dt}


def lab_figures(browser) -> dict:
    """Run the in-Lab measures; returns the figures (times in ms)."""
    from test_jupyterlab import notebook, open_notebook

    out: dict = {"tabs": {}}
    with tempfile.TemporaryDirectory(prefix="pallaslab-bench-lab-") as tmp:
        root = Path(tmp)
        notebook(root / "bench.ipynb", lab_cells(root))
        t_start = time.perf_counter()
        with jupyter_lab(root) as lab:
            context = browser.new_context(viewport={"width": 1440, "height": 1100})
            try:
                context.add_init_script(RAF_COUNTER)
                page = context.new_page()
                page.requests_attempted = []
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                open_notebook(page, lab, "bench.ipynb")  # only the Lab server reachable
                out["lab_start_s"] = time.perf_counter() - t_start
                # more room for the notebook: close the file browser
                page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()
                cdp = context.new_cdp_session(page)
                cdp.send("Performance.enable")

                _run_cell(page, 0)  # imports, arrays
                _wait_idle(page, 0)
                page.wait_for_timeout(1000)
                out["idle_lab"] = _idle_cpu(page, cdp)

                # run -> workbench drawn: cold (first %%pallas in this kernel), then warm
                runs = []
                for _ in range(1 + WARM_RUNS):
                    page.evaluate(RUN_ARM, RUN_CELL)
                    _run_cell(page, RUN_CELL)
                    page.wait_for_function("window.__plRun.painted !== null", timeout=300000,
                                           polling=50)
                    m = page.evaluate("window.__plRun")
                    _wait_idle(page, RUN_CELL)
                    runs.append({"total": m["painted"] - m["t0"],
                                 "inserted": m["inserted"] - m["t0"]})
                    page.wait_for_timeout(500)
                kernel = _kernel_times(root)[1:]  # cell 0 first
                for r, k in zip(runs, kernel, strict=False):
                    r["kernel"] = 1000 * k
                out["runs"] = runs

                # hover inside Lab, on the workbench's grid
                grid = page.locator(".jp-Notebook .jp-Cell").nth(RUN_CELL).locator(
                    "canvas[data-role=grid]")
                grid.scroll_into_view_if_needed()
                page.evaluate(LAB_HOVER_JS, [RUN_CELL, 20])  # JIT warm-up
                out["hover"] = page.evaluate(LAB_HOVER_JS, [RUN_CELL, 50])
                box = page.evaluate(POINTER_ARM, RUN_CELL)
                seed = 7
                for h in range(60):
                    seed = (seed * 1103515245 + 12345) % 2147483648
                    at = seed % (box["rows"] * box["cols"])
                    page.mouse.move(box["x"] + (at % box["cols"] + 0.5) * box["cell"] + h % 3,
                                    box["y"] + (at // box["cols"] + 0.5) * box["cell"])
                page.mouse.move(5, 5)
                pointer = page.evaluate("window.__plPointer")
                out["pointer"] = {k: pointer[k][10:] for k in ("handler", "input")}
                out["pointer"]["changed"] = pointer["changed"]

                # tabs' first builds, in a workbench opened on its Overview tab
                page.evaluate("window.__plRun = null")
                _run_cell(page, TABS_CELL)
                page.wait_for_function(
                    "(i) => document.querySelectorAll('.jp-Notebook .jp-Cell')[i]"
                    ".querySelector('.jp-OutputArea .pl-overview')", arg=TABS_CELL,
                    timeout=300000, polling=100)
                _wait_idle(page, TABS_CELL)
                page.wait_for_timeout(500)
                tabs = page.locator(".jp-Notebook .jp-Cell").nth(TABS_CELL).locator(
                    ".widget-tab-bar .lm-TabBar-tab")
                for label in LAB_TABS:
                    page.evaluate(TAB_ARM, [TABS_CELL, label])
                    tabs.filter(has_text=label).first.click()
                    page.wait_for_function("window.__plTab.painted !== null", timeout=300000,
                                           polling=50)
                    m = page.evaluate("window.__plTab")
                    _wait_idle(page, TABS_CELL)
                    out["tabs"][label] = {"total": m["painted"] - m["t0"],
                                          "first": m["first"] - m["t0"],
                                          "rebuilt": m["built"]}
                    page.wait_for_timeout(300)

                # the renderer idle on the Pipeline tab (already built: back to it)
                tabs.filter(has_text="Pipeline").first.click()
                pipe = page.locator(".jp-Notebook .jp-Cell").nth(TABS_CELL).locator(
                    ".pl-pipeline")
                pipe.evaluate("e => e.scrollIntoView({block: 'start'})")
                page.wait_for_timeout(1500)
                width = "e => [e.getBoundingClientRect().width, e.scrollWidth]"
                w0 = pipe.evaluate(width)
                out["idle_pipeline"] = _idle_cpu(page, cdp)
                out["idle_pipeline"]["widths"] = (w0, pipe.evaluate(width))
                out["errors"] = errors
                out["requests"] = page.requests_attempted
            finally:
                context.close()
    return out


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def lab_rows(f: dict) -> list[tuple]:
    ms = "{:.0f} ms".format
    runs = f["runs"]
    cold, warm = runs[0], runs[1:]
    mid = sorted(warm, key=lambda r: r["total"])[len(warm) // 2]  # the median warm run
    nan = float("nan")
    rows = [
        ("Lab: %%pallas run -> grid painted, cold", ms(cold["total"]), "", None),
        ("  of which the cell in the kernel", ms(cold.get("kernel", nan)), "", None),
        ("  of which the rest (messages, render, paint)",
         ms(cold["total"] - cold.get("kernel", nan)), "", None),
        (f"Lab: %%pallas run -> grid painted, warm (median of {len(warm)})", ms(mid["total"]),
         "< 1.5 s", mid["total"] / 1500),
        ("  of which the cell in the kernel", ms(mid.get("kernel", nan)), "", None),
        ("  of which the rest (messages, render, paint)",
         ms(mid["total"] - mid.get("kernel", nan)), "", None),
    ]
    for label, t in f["tabs"].items():
        note = " (was built)" if t["rebuilt"] else ""
        rows.append((f"Lab: tab first build, {label}{note}", ms(t["total"]), "< 300 ms",
                     t["total"] / 300))
    h = f["hover"]["times"]
    rows += [
        (f"Lab: hover -> info panel, median of {len(h)}", f"{statistics.median(h):.2f} ms",
         "< 16 ms", statistics.median(h) / 16),
        ("Lab: hover -> info panel, p95", f"{_pct(h, 0.95):.2f} ms", "< 16 ms",
         _pct(h, 0.95) / 16),
    ]
    p = f["pointer"]
    if p["handler"]:
        med, p95 = statistics.median(p["handler"]), _pct(p["handler"], 0.95)
        rows += [
            (f"Lab: real pointer, grid handler, median of {len(p['handler'])}",
             f"{med:.2f} ms", "< 16 ms", med / 16),
            ("Lab: real pointer, grid handler, p95", f"{p95:.2f} ms", "< 16 ms", p95 / 16),
            ("  input timestamp -> handled, median / p95",
             f"{statistics.median(p['input']):.1f} / {_pct(p['input'], 0.95):.1f} ms", "", None),
        ]
    lab, pipe = f["idle_lab"], f["idle_pipeline"]
    # idle: no animation frames, and no more main-thread work than Lab alone (+ 5 ms/s)
    idle = pipe["rafs"] == 0 and pipe["TaskDuration"] <= lab["TaskDuration"] + 5
    rows += [
        ("Lab alone idle: main-thread CPU", f"{lab['TaskDuration']:.1f} ms/s", "", None),
        ("Lab alone idle: animation frames", f"{lab['rafs']:.1f} /s", "", None),
        ("Lab idle on Pipeline tab: main-thread CPU", f"{pipe['TaskDuration']:.1f} ms/s",
         "idle", "met" if idle else "MISSED"),
        ("  of which script", f"{pipe['ScriptDuration']:.1f} ms/s", "", None),
        ("Lab idle on Pipeline tab: animation frames", f"{pipe['rafs']:.1f} /s", "0 /s",
         "met" if pipe["rafs"] == 0 else "MISSED"),
    ]
    return rows

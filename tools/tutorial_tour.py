"""The newcomer's tour: every tutorial run top to bottom in a real JupyterLab and a real
Notebook 7 (Debian's Chromium, every request that leaves the server refused), screenshots of
what a person scrolling through would see, and a summary of what went wrong.

    JAX_PLATFORMS=cpu .venv/bin/python tools/tutorial_tour.py [--only 01,05] [--out DIR]

JupyterLab in the light theme at 1440x1000, Notebook 7 in the dark theme at 1280x760 (the two
geometries and themes the issues name). Per notebook and front end: the seconds Run All took,
the error outputs and stderr streams of the saved notebook, the page's JavaScript errors and
the requests refused; screenshots to DIR/{front end}-{notebook}-{nn}.png (default
test-results/tour/) and DIR/summary.json. Not part of `make test` (tests/test_notebooks.py
runs the tutorials headless, tests/browser/ the widgets): this is for reading with one's eyes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "browser"))

from _chromium import launch  # noqa: E402
from _servers import jupyter_server  # noqa: E402

FRONT_ENDS = {  # name -> (jupyter app, URL path, theme, viewport)
    "lab": ("lab", "lab/tree", "JupyterLab Light", (1440, 1000)),
    "notebook7": ("notebook", "notebooks", "JupyterLab Dark", (1280, 760)),
}
MAX_SHOTS = 40  # per notebook and front end


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="notebook name prefixes, comma-separated")
    ap.add_argument("--front-ends", default=",".join(FRONT_ENDS))
    ap.add_argument("--out", default=str(ROOT / "test-results" / "tour"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")
                   if not args.only or p.name.startswith(tuple(args.only.split(","))))
    from playwright.sync_api import sync_playwright

    summary = []
    with sync_playwright() as pw:
        browser = launch(pw)
        for front in args.front_ends.split(","):
            summary += tour(browser, front, names, out)
        browser.close()
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    for row in summary:
        print(f"{row['front_end']:9} {row['notebook']:36} {row['seconds']:6.1f} s  "
              f"errors {len(row['errors'])}  stderr {len(row['stderr'])}  "
              f"js errors {len(row['js_errors'])}  refused {len(row['refused'])}  "
              f"shots {row['shots']}")
    bad = [r for r in summary if r["errors"] or r["js_errors"] or r["refused"]]
    print(f"tour: {len(summary)} notebook runs, {len(bad)} with errors; screenshots in {out}")
    return 1 if bad else 0


def tour(browser, front: str, names: list[str], out: Path) -> list[dict]:
    app, path, theme, (width, height) = FRONT_ENDS[front]
    root = Path(tempfile.mkdtemp(prefix=f"tour-{front}-"))
    shutil.copytree(ROOT / "notebooks", root, dirs_exist_ok=True)
    themes = root / ".settings" / "@jupyterlab" / "apputils-extension"
    themes.mkdir(parents=True, exist_ok=True)
    (themes / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))
    rows = []
    with jupyter_server(root, app) as server:
        for name in names:
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            rows.append(run_one(page, server, front, path, name, root, out))
            context.close()
            for s in api(server, "sessions"):  # one kernel at a time, as a person would
                api(server, f"sessions/{s['id']}", "DELETE")
    shutil.rmtree(root, ignore_errors=True)
    return rows


def run_one(page, server, front: str, path: str, name: str, root: Path, out: Path) -> dict:
    base = server["base"]
    refused: list[str] = []
    js_errors: list[str] = []
    page.on("request", lambda r: None if r.url.startswith((base, "data:", "blob:"))
            else refused.append(r.url))
    page.on("pageerror", lambda e: js_errors.append(str(e)))
    # `reset`: JupyterLab would otherwise restore the previous notebook's tab beside this one
    page.goto(f"{base}/{path}/{name}?reset&token={server['token']}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90000)
    wait(lambda: kernels_idle(server), 120)
    start = time.monotonic()
    menu(page, "Run", "Run All Cells")
    # Done when the saved notebook has every code cell numbered and the kernel is idle (the
    # kernel alone can look idle between two cells of Run All).
    while time.monotonic() - start < 900:
        page.wait_for_timeout(3000)
        page.keyboard.press("Control+s")
        page.wait_for_timeout(1000)
        if all_ran(root / name) and kernels_idle(server):
            break
    seconds = time.monotonic() - start
    shots = screenshots(page, out, f"{front}-{name.removesuffix('.ipynb')}")
    outputs = [o for c in json.loads((root / name).read_text())["cells"]
               if c["cell_type"] == "code" for o in c.get("outputs", [])]
    # Notebook 7.6's shortcuts plugin throws once while loading (not ours: test_notebook7)
    js_errors = [e for e in js_errors
                 if e != "Cannot read properties of undefined (reading 'schema')"]
    return {"front_end": front, "notebook": name, "seconds": round(seconds, 1),
            "errors": [f"{o['ename']}: {o['evalue']}" for o in outputs
                       if o.get("output_type") == "error"],
            "stderr": ["".join(o["text"])[:300] for o in outputs
                       if o.get("output_type") == "stream" and o.get("name") == "stderr"],
            "js_errors": js_errors, "refused": refused, "shots": shots}


def all_ran(path: Path) -> bool:
    """Every code cell has run, or one failed (Run All stops there)."""
    code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    failed = any(o.get("output_type") == "error" for c in code for o in c.get("outputs", []))
    return failed or all(c.get("execution_count") for c in code)


def screenshots(page, out: Path, stem: str) -> int:
    """Scroll the notebook a screen at a time from the top, one screenshot per screen."""
    scroller = page.locator(".jp-WindowedPanel-outer").first
    scroller.evaluate("e => { e.scrollTop = 0; }")
    page.wait_for_timeout(500)
    shots = 0
    while shots < MAX_SHOTS:
        page.screenshot(path=str(out / f"{stem}-{shots:02}.png"))
        shots += 1
        moved = scroller.evaluate("""e => { const before = e.scrollTop;
            e.scrollTop = before + e.clientHeight * 0.9; return e.scrollTop > before; }""")
        if not moved:
            break
        page.wait_for_timeout(1500)  # windowed cells render as they come into view
    return shots


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def api(server, path: str, method: str = "GET") -> list:
    req = urllib.request.Request(f"{server['base']}/api/{path}?token={server['token']}",
                                 method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else []


def kernels_idle(server) -> bool:
    try:
        kernels = api(server, "kernels")
    except urllib.error.URLError:  # may answer 500 while a kernel starts: ask again
        return False
    return bool(kernels) and all(k["execution_state"] == "idle" for k in kernels)


def wait(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"still waiting after {timeout} s")
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())

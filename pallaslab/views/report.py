"""One self-contained, offline HTML page with every view of every kernel.

The views' own ES modules are embedded (base64) and mounted in the page by `host.js` with an
in-page model, so the report is as interactive as it can be without a kernel (the grid hover
works from the embedded tables). A Content-Security-Policy forbids every network load; each
view's static HTML is the `<noscript>` fallback.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from typing import Any

from pallaslab.errors import PallasLabError
from pallaslab.views.base import View, css_source, module_source
from pallaslab.views.context import KernelContext
from pallaslab.views.registry import tabs

CSP = ("default-src 'none'; script-src 'unsafe-inline' blob:; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:")


def encode_buffers(value: Any) -> Any:
    """JSON-able copy of a payload with every binary buffer as {"$b64": ...}."""
    if isinstance(value, (memoryview, bytes, bytearray)):
        return {"$b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {k: encode_buffers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_buffers(v) for v in value]
    return value


def script_json(value: Any) -> str:
    """JSON safe inside a <script> element (no '</script>', no '<!--')."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c").replace(
        "\u2028", "\\u2028").replace("\u2029", "\\u2029")


def kernel_views(ctx: KernelContext) -> list[tuple[str, str, View]]:
    """(name, title, view) of every tab available for a kernel, in tab order."""
    return [(t.name, t.title, t.build(ctx)) for t in tabs() if t.available(ctx)]


def report_html(contexts: Sequence[KernelContext], title: str) -> str:
    sources: dict[str, str] = {}
    kernels = []
    static = []
    for ctx in contexts:
        k = ctx.kernel
        entries = []
        for name, tab_title, view in kernel_views(ctx):
            try:
                payload = encode_buffers(view.report_payload())
                static.append(view.to_html())
            except PallasLabError as err:  # one view failing must not lose the others
                entries.append({"name": name, "title": tab_title, "module": None,
                                "payload": None, "error": f"{tab_title}: {err}"})
                continue
            if view.module not in sources:
                sources[view.module] = base64.b64encode(
                    module_source(view.module).encode()).decode("ascii")
            entries.append({"name": name, "title": tab_title, "module": view.module,
                            "payload": payload})
        grid = " x ".join("?" if g is None else str(g) for g in k.grid) or "()"
        kernels.append({"title": f"Kernel {k.index}: {k.name}",
                        "subtitle": f"grid {grid} · {len(ctx.findings)} finding(s)",
                        "tabs": entries})
    data = {"modules": sources, "kernels": kernels}
    host = module_source("host.js")
    esc_title = html.escape(title)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pallaslab report: {esc_title}</title>
<style>{css_source()}
body {{ margin: 0; }}
.pl-report-page {{ padding: 16px 24px 40px; min-height: 100vh; }}
.pl-report-page > header {{ display: flex; align-items: baseline; gap: 12px; }}
.pl-report-page > header h1 {{ font-size: 18px; margin: 0; }}
.pl-report-page > header button {{ margin-left: auto; font: inherit; font-size: 12px;
  color: var(--pl-fg); background: var(--pl-bg2); border: 1px solid var(--pl-border);
  border-radius: 4px; padding: 2px 8px; cursor: pointer; }}
</style></head>
<body class="pl-report">
<div class="pallaslab pl-report-page">
<header><h1>pallaslab report</h1><span class="pl-dim pl-mono">{esc_title}</span>
<button id="pl-theme" type="button">light / dark</button></header>
<div id="pl-root"></div>
<noscript>{"".join(static)}</noscript>
</div>
<script type="application/json" id="pl-data">{script_json(data)}</script>
<script type="module">{host}</script>
</body></html>
"""

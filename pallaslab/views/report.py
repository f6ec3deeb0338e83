"""One self-contained, offline HTML page with every view of every kernel.

The views' own ES modules are embedded (base64) and mounted in the page by `host.js` with an
in-page model, so the report is as interactive as it can be without a kernel (the grid hover
works from the embedded tables). A Content-Security-Policy forbids every network load and runs
only the report's own script (by its hash); each view's static HTML is the `<noscript>` fallback.
User strings (kernel names, paths, IR) are shown visibly (`pallaslab.util.text.visible`) and
escaped, so a name can neither reorder the text around it nor close an element.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from typing import Any

from pallaslab.errors import PallasLabError
from pallaslab.util.text import visible
from pallaslab.views._html import visible_payload
from pallaslab.views.base import View, css_source, module_source
from pallaslab.views.context import KernelContext
from pallaslab.views.registry import tabs


def csp(script: str, style: str) -> str:
    """The report's Content-Security-Policy, allowing exactly its own inline `script` and
    `style` elements (by their sha256) and nothing from the network.

    - script-src has no 'unsafe-inline': an injected `<script>` or `onerror=` handler does
      not run. The JSON data block (`type="application/json"`) is never executed, so it needs
      no entry.
    - `blob:` lets the hashed host script import the views' modules, which it makes into blob:
      URLs from the embedded sources. Only running script can create a blob: URL (markup
      cannot), and the only script that can run is the hashed one, so `blob:` admits nothing
      else. ('strict-dynamic' would also admit network imports, so it is not used.)
    - style-src-attr 'unsafe-inline': the static `<noscript>` views size their bars with
      style attributes; styles cannot run code, and with nothing loadable they cannot send
      anything either. Widgets set styles through the CSSOM, which CSP does not restrict.
    """
    return (f"default-src 'none'; script-src {_hash(script)} blob:; "
            f"style-src {_hash(style)}; style-src-attr 'unsafe-inline'; "
            "img-src data: blob:; font-src data:; base-uri 'none'; form-action 'none'")


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


def _lf(text: str) -> str:
    """Newlines as the HTML parser sees them (it turns CR LF and CR into LF before hashing)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


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
    # Every string the host puts on the page, visible (the views' payloads already are).
    data = {"modules": sources, "kernels": visible_payload(kernels)}
    host = _lf(module_source("host.js"))
    style = _lf(css_source() + PAGE_CSS)
    esc_title = html.escape(visible(title))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp(host, style)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pallaslab report: {esc_title}</title>
<style>{style}</style></head>
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


PAGE_CSS = """
body { margin: 0; }
.pl-report-page { padding: 16px 24px 40px; min-height: 100vh; }
.pl-report-page > header { display: flex; align-items: baseline; gap: 12px; }
.pl-report-page > header h1 { font-size: 18px; margin: 0; }
.pl-report-page > header button { margin-left: auto; font: inherit; font-size: 12px;
  color: var(--pl-fg); background: var(--pl-bg2); border: 1px solid var(--pl-border);
  border-radius: 4px; padding: 2px 8px; cursor: pointer; }
"""

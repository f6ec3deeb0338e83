"""A test page that mounts a view's ES module against an in-page fake model."""

from __future__ import annotations

import base64

from pallaslab.views.base import css_source, module_source
from pallaslab.views.report import encode_buffers, script_json


def harness_html(module: str, payload: dict, *, dark: bool = False) -> str:
    view = base64.b64encode(module_source(module).encode()).decode()
    host = base64.b64encode(module_source("host.js").encode()).decode()
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>{css_source()}
body {{ margin: 0; padding: 12px; }}</style></head>
<body class="pl-report {'pl-dark' if dark else 'pl-light'}"><div class="pallaslab" id="bg">
<div id="root"></div></div>
<script type="application/json" id="payload">{script_json(encode_buffers(payload))}</script>
<script type="module">
const load = (b64) => import(URL.createObjectURL(new Blob(
  [new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)))],
  {{type: "text/javascript"}})));
const host = await load("{host}");
const view = await load("{view}");
const payload = host.revive(JSON.parse(document.getElementById("payload").textContent));
const model = new host.StaticModel({{payload, selection: {{}}}});
model.saved = [];
model.save_changes = () => model.saved.push(structuredClone(model.get("selection")));
const t0 = performance.now();
window.cleanup = view.default.render({{model, el: document.getElementById("root")}});
window.firstPaintMs = performance.now() - t0;
Object.assign(window, {{model, view, host, payload}});
window.ready = true;
</script></body></html>"""


def mount(page, module: str, payload: dict, **kw) -> None:
    # set_content rewrites the document in the same window, whose globals survive: clear the
    # previous mount's flag so we wait for this module, not the last one.
    page.evaluate("window.ready = false")
    page.set_content(harness_html(module, payload, **kw))
    page.wait_for_function("window.ready === true", timeout=20000)

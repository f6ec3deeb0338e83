"""A view: a pure payload, a thin anywidget, static HTML and text.

Subclasses set `module` (the ES module in `pallaslab/views/static/`, e.g. "grid.js") and
implement `payload()` (a JSON-able dict whose arrays are `memoryview`s: ipywidgets sends those
as binary buffers), `to_html()` and `to_text()`. The widget class is made on first use, so views
work without the notebook extra (text and HTML need nothing beyond numpy).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from pallaslab.errors import missing

STATIC = Path(__file__).parent / "static"
CSS_FILE = STATIC / "pallaslab.css"


class View:
    """Base class of every view. Displaying one in Jupyter shows its widget."""

    name: ClassVar[str] = "view"  # the tab name
    module: ClassVar[str] = ""  # ES module file in static/

    def payload(self) -> dict[str, Any]:
        raise NotImplementedError

    def report_payload(self) -> dict[str, Any]:
        """The payload embedded in the offline report (no Python to ask for more later).
        Views whose live payload is fetched lazily override this to include more."""
        return self.payload()

    def to_html(self) -> str:
        raise NotImplementedError

    def to_text(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return self.to_text()

    @functools.cached_property
    def widget(self) -> Any:
        """The live anywidget (made once; needs `pallaslab[notebook]`)."""
        return widget_class(self.module)(payload=self.payload())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = {"text/plain": self.to_text(), "text/html": html_fragment(self.to_html())}
        with contextlib.suppress(ImportError):  # no anywidget: the static forms still display
            bundle.update(_widget_bundle(self.widget))
        return bundle

    def _ipython_display_(self) -> None:
        display_live_and_saved(lambda: self.widget, self.to_text, self.to_html)


class InteractiveView(View):
    """A view whose widget talks back: the widget sets `selection`, `_on_selection` answers,
    and `_push()` sends the new live payload. Static renderings use `live=False`."""

    def _payload(self, *, live: bool) -> Mapping[str, Any]:
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        return dict(self._payload(live=False))

    @functools.cached_property
    def widget(self) -> Any:
        w = widget_class(self.module)(payload=self._payload(live=True))
        w.observe(self._on_selection, names="selection")
        return w

    def _on_selection(self, change: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _new_action(self, change: Mapping[str, Any]) -> dict[str, Any] | None:
        """The widget's `selection` when it asks for an action not answered yet (each request
        carries a fresh `nonce`; echoes of our own selection changes carry the old one)."""
        sel = dict(change["new"] or {})
        if "action" not in sel or sel.get("nonce") == self.__dict__.get("_nonce"):
            return None
        self.__dict__["_nonce"] = sel.get("nonce")
        return sel

    def _push(self) -> None:
        """Send the live payload to the widget, if one has been shown (none is made here)."""
        if "widget" in self.__dict__:
            self.widget.payload = self._payload(live=True)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
LIVE_CLASS = "pl-live-widget"  # on the live widget's root element
SAVED_CLASS = "pl-saved-widget"  # on the static copy displayed after it

# A saved notebook keeps the widget's output, but not its model: reopened, JupyterLab's widget
# renderer (which outranks text/html in the same output) says "model not found". So the static
# copy is an output of its own, right after the live one, and these rules (JupyterLab and
# Notebook 7 share the output area's markup) show exactly one of the two: the live widget
# hides its copy; the widget's output holding no element (its renderer's bare "Loading
# widget..." or "model not found" text; it carries no data-mime-type) is hidden and the copy
# shows. Elsewhere (nbviewer, GitHub, nbconvert) the widget output, having
# no saved state, falls back to its empty text/html and the copy is what reads.
SAVED_COPY_CSS = (
    f".jp-OutputArea-child:has(.{LIVE_CLASS}) + .jp-OutputArea-child:has(.{SAVED_CLASS})"
    " { display: none; }\n"
    f".jp-OutputArea-child:has(+ .jp-OutputArea-child .{SAVED_CLASS}) > "
    ".jp-OutputArea-output:not(:has(*)) { display: none; }\n"
    # Notebook 7 scrolls a reopened notebook's tall outputs in a 24em (~280 px) box, shaded by
    # an ::after overlay as tall as the box that also lengthens what scrolls: the copy takes
    # its natural height instead, unboxed, as the live widget did
    f".jp-CodeCell.jp-mod-outputsScrolled .jp-Cell-outputArea:has(.{SAVED_CLASS})"
    " { max-height: none; overflow-y: visible; }\n"
    f".jp-CodeCell.jp-mod-outputsScrolled .jp-Cell-outputArea:has(.{SAVED_CLASS})::after"
    " { display: none; }\n")
LIVE_PLACEHOLDER = f'<div class="pallaslab pl-live-placeholder" data-copy="{SAVED_CLASS}"></div>'


def live_and_saved_bundles(widget: Callable[[], Any], text: Callable[[], str],
                           html: Callable[[], str]) -> list[dict[str, Any]]:
    """What displaying a view publishes: the live widget's output, then its static copy (the
    one that reads wherever the widget cannot be restored); without the widget libraries, the
    static forms alone. `html` is the view's static body (no stylesheet)."""
    try:
        live = widget()
    except ImportError:
        return [{"text/plain": text(), "text/html": html_fragment(html())}]
    live.add_class(LIVE_CLASS)
    return [{"text/plain": text(), "text/html": LIVE_PLACEHOLDER, **_widget_bundle(live)},
            {"text/html": saved_fragment(html())}]


def display_live_and_saved(widget: Callable[[], Any], text: Callable[[], str],
                           html: Callable[[], str]) -> None:
    """Display `live_and_saved_bundles` as consecutive outputs (IPython's display hook calls
    this through `_ipython_display_`, so a cell's last line shows them too)."""
    from IPython.display import display

    for bundle in live_and_saved_bundles(widget, text, html):
        display(bundle, raw=True)


def _widget_bundle(widget: Any) -> dict[str, Any]:
    data = widget._repr_mimebundle_()
    data = data[0] if isinstance(data, tuple) else data
    return {k: v for k, v in (data or {}).items() if k != "text/plain"}


def module_source(module: str) -> str:
    """The ES module `module` as anywidget (and the report) load it: one string, its local
    imports (`./prelude.js`, `./grid_draw.js`, ...) inlined. See `assemble`."""
    return _assembled(module)


# `import { a, b } from "./x.js";` and `export { a } from "./x.js";` (one statement, may span
# lines); only local modules of static/ are imported.
_LOCAL_IMPORT = re.compile(r'^(import|export)\s*(\{[^}]*\})\s*from\s*"\./([\w-]+\.js)";[ \t]*\n?',
                           re.MULTILINE)
_EXPORT_DECL = re.compile(r"^export (?=(?:async\s+)?function\b|const\b|let\b|class\b)",
                          re.MULTILINE)
_EXPORT_LIST = re.compile(r"^export\s*\{[^}]*\};[ \t]*\n?", re.MULTILINE)


def assemble(module: str, read: Callable[[str], str] | None = None) -> str:
    """One ES module from `module` and the local modules it imports, for loaders that take a
    single string. The sources import from each other (so tsc checks them as modules); here each
    imported module's text is inlined once, before its importers, with its `export`s dropped (its
    names become the assembled module's own top-level names), each `import {...} from "./x.js"`
    line is removed and each `export {...} from "./x.js"` becomes `export {...};`. So a module
    exports what it declares and what it re-exports, never its helpers' other names."""
    read = read or (lambda name: (STATIC / name).read_text(encoding="utf-8"))
    order: list[str] = []
    texts: dict[str, str] = {}

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in texts:
            return
        if name in stack:
            raise ValueError(f"ES modules import each other in a cycle: {' -> '.join(stack)}")
        text = read(name)
        for m in _LOCAL_IMPORT.finditer(text):
            visit(m.group(3), (*stack, name))
        texts[name] = _LOCAL_IMPORT.sub(
            lambda m: f"export {m.group(2)};\n" if m.group(1) == "export" else "", text)
        order.append(name)

    visit(module, ())
    parts = [f"// ---- {name} (inlined) ----\n"
             + _EXPORT_LIST.sub("", _EXPORT_DECL.sub("", texts[name])) for name in order[:-1]]
    return "".join(parts) + texts[module]


@functools.cache
def _assembled_cached(module: str, stamp: tuple[float, ...]) -> str:
    return assemble(module)


def _assembled(module: str) -> str:
    # cached while the files are unchanged (a developer editing a module sees the edit)
    stamp = tuple(f.stat().st_mtime for f in sorted(STATIC.glob("*.js")))
    return _assembled_cached(module, stamp)


def css_source() -> str:
    return CSS_FILE.read_text(encoding="utf-8")


def html_fragment(body: str) -> str:
    """Static HTML that carries its own stylesheet (for nbviewer, GitHub and the report)."""
    return f'<div class="pallaslab pl-static"><style>{css_source()}</style>{body}</div>'


def saved_fragment(body: str) -> str:
    """`html_fragment` as the static copy displayed after a live widget (see
    `SAVED_COPY_CSS`)."""
    return (f'<div class="pallaslab pl-static {SAVED_CLASS}"><style>{css_source()}'
            f"{SAVED_COPY_CSS}</style>{body}</div>")


@functools.cache
def widget_class(module: str) -> type:
    """The anywidget class for an ES module (one class per module, made once)."""
    try:
        import anywidget
        import traitlets
    except ImportError as err:
        raise missing("the pallaslab widgets", err.name or "anywidget", "notebook") from None
    stem = module.removesuffix(".js").replace("-", "_").capitalize()
    return type(f"{stem}Widget", (anywidget.AnyWidget,), {
        "__module__": __name__,
        "_esm": module_source(module),  # one string: its local imports inlined
        "_css": CSS_FILE,
        "payload": traitlets.Dict().tag(sync=True),
        # What the user selected in the browser (e.g. {"step": 12}); read it from Python.
        "selection": traitlets.Dict().tag(sync=True),
    })

"""A view: a pure payload, a thin anywidget, static HTML and text.

Subclasses set `module` (the ES module in `pallaslab/views/static/`, e.g. "grid.js") and
implement `payload()` (a JSON-able dict whose arrays are `memoryview`s: ipywidgets sends those
as binary buffers), `to_html()` and `to_text()`. The widget class is made on first use, so views
work without the notebook extra (text and HTML need nothing beyond numpy).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
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

    def _push(self) -> None:
        """Send the live payload to the widget, if one has been shown (none is made here)."""
        if "widget" in self.__dict__:
            self.widget.payload = self._payload(live=True)


def _widget_bundle(widget: Any) -> dict[str, Any]:
    data = widget._repr_mimebundle_()
    data = data[0] if isinstance(data, tuple) else data
    return {k: v for k, v in (data or {}).items() if k != "text/plain"}


def module_source(module: str) -> str:
    return (STATIC / module).read_text(encoding="utf-8")


def css_source() -> str:
    return CSS_FILE.read_text(encoding="utf-8")


def html_fragment(body: str) -> str:
    """Static HTML that carries its own stylesheet (for nbviewer, GitHub and the report)."""
    return f'<div class="pallaslab pl-static"><style>{css_source()}</style>{body}</div>'


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
        "_esm": STATIC / module,
        "_css": CSS_FILE,
        "payload": traitlets.Dict().tag(sync=True),
        # What the user selected in the browser (e.g. {"step": 12}); read it from Python.
        "selection": traitlets.Dict().tag(sync=True),
    })

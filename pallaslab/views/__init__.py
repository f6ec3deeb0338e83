"""Views: one per workbench tab, each a pure payload + an anywidget + static HTML + text.

- `registry` (tabs register themselves; see it to add one), `base` (the `View` class),
  `context` (what a view is built from), `session` (what Compare and Step share);
- one module per tab: `overview`, `grid`, `memory` / `memory_gpu`, `pipeline` /
  `pipeline_manual` / `pipeline_record`, `step` / `step_devices`, `compare` /
  `compare_payload`, `lowering` / `lowering_payload`, `devices`;
- `report` (one offline HTML file of every view), `_html` and `arrays` (shared rendering);
  the widgets' ES modules live in `static/`.

Importing this package registers the built-in tabs; later tabs register themselves the same
way (see `pallaslab.views.registry`).
"""

from pallaslab.views import compare as _compare_tab  # noqa: F401  (registers the tab)
from pallaslab.views import devices as _devices_tab  # noqa: F401  (registers the tab)
from pallaslab.views import lowering as _lowering_tab  # noqa: F401  (registers the tab)
from pallaslab.views import memory as _memory_tab  # noqa: F401  (registers the tab)
from pallaslab.views import pipeline as _pipeline_tab  # noqa: F401  (registers the tab)
from pallaslab.views import step as _step_tab  # noqa: F401  (registers the tab)
from pallaslab.views.base import View, widget_class
from pallaslab.views.context import KernelContext
from pallaslab.views.grid import GridView, grid_payload
from pallaslab.views.overview import OverviewView, overview_payload
from pallaslab.views.registry import Tab, register_tab, tabs

__all__ = [
    "GridView",
    "KernelContext",
    "OverviewView",
    "Tab",
    "View",
    "grid_payload",
    "overview_payload",
    "register_tab",
    "tabs",
    "widget_class",
]

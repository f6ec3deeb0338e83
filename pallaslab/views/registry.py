"""The tab registry: every analysis shown in the workbench registers itself here.

A tab is a name, an order, a predicate saying whether it applies to a kernel, and a builder
returning its `View`. Adding a tab (Memory, Pipeline, Step, ...) means writing one module that
calls `register_tab` and importing it from `pallaslab.views`; no existing view changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pallaslab.views.base import View
    from pallaslab.views.context import KernelContext


@dataclasses.dataclass(frozen=True)
class Tab:
    name: str  # lower-case identifier: `--tab NAME`, `wb.view(NAME)`, `wb.NAME()`
    title: str  # what the tab bar shows
    order: int  # position in the tab bar (lower first)
    available: Callable[[KernelContext], bool]
    build: Callable[..., View]  # (ctx, **options) -> View


_TABS: dict[str, Tab] = {}


def register_tab(
    name: str,
    *,
    order: int,
    build: Callable[..., View],
    available: Callable[[KernelContext], bool] = lambda ctx: True,
    title: str | None = None,
) -> Tab:
    """Add (or replace) a workbench tab. Returns the registered `Tab`."""
    if not name.isidentifier() or name != name.lower():
        raise ValueError(f"tab name {name!r} must be a lower-case identifier (e.g. 'memory')")
    tab = Tab(name=name, title=title or name.capitalize(), order=order, available=available,
              build=build)
    _TABS[name] = tab
    return tab


def unregister_tab(name: str) -> None:
    _TABS.pop(name, None)


def tabs() -> tuple[Tab, ...]:
    """Every registered tab, in tab-bar order."""
    return tuple(sorted(_TABS.values(), key=lambda t: (t.order, t.name)))


def tab(name: str) -> Tab:
    try:
        return _TABS[name]
    except KeyError:
        known = ", ".join(t.name for t in tabs())
        raise KeyError(f"no workbench tab named {name!r}; the tabs are: {known}") from None

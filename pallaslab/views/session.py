"""What the Compare and Step views of one workbench share: the call to re-run, the comparison
(when one was made), the step views, and the workbench (to switch its tabs to the Step tab and
select a program in its Grid tab).

The workbench owns its `Session` (`wb.session`) and hands it to its views in each
`KernelContext`; the frozen `Capture` holds no state of theirs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pallaslab.model import Capture

if TYPE_CHECKING:
    from pallaslab.execute import Comparison, RunResult

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
V = TypeVar("V")


@dataclasses.dataclass(eq=False)
class Session:
    """The Compare/Step state of one workbench (or of a `KernelContext` made alone)."""

    capture: Capture
    call: Call | None = None  # the user's own call; None: re-run the captured jaxpr
    comparison: Comparison | None = None
    device_run: RunResult | None = None  # the call's run on simulated devices (--devices)
    step_views: dict[int, Any] = dataclasses.field(default_factory=dict)  # StepView
    compare_views: dict[int, Any] = dataclasses.field(default_factory=dict)  # CompareView
    workbench_ref: Callable[[], Any] | None = None  # weakref to the workbench, when known

    def call_args(self) -> Call:
        """(fn, args, kwargs) that re-run the captured function. Without the user's call, the
        captured jaxpr on its flat arguments (abstract ones get the executors' seeded data)."""
        if self.call is not None:
            return self.call
        from pallaslab.model import _jax

        handle = self.capture.handle
        fn = _jax.jaxpr_callable(handle.closed_jaxpr)
        fn.__name__ = self.capture.function_name
        return fn, tuple(handle.flat_args), {}

    def traceable_call(self) -> Call | None:
        """The call to trace again elsewhere (on N simulated devices): the user's own, else the
        function the capture traced (a mesh built from `jax.devices()` is built there anew;
        the captured jaxpr keeps this process's); None when neither is known."""
        if self.call is not None:
            return self.call
        handle = self.capture.handle
        if handle is not None and getattr(handle, "fn", None) is not None:
            return handle.fn, tuple(handle.args), dict(handle.kwargs)
        return None

    @property
    def workbench(self) -> Any:
        return self.workbench_ref() if self.workbench_ref is not None else None

    def step_view(self, ctx: Any, make: Callable[[Any], V]) -> V:
        """The Step view of the `KernelContext`'s kernel, one per kernel: made by `make`
        (`StepView`) on first use. (Typed loosely: the context module imports this one.)"""
        view = self.step_views.get(ctx.kernel.index)
        if view is None:
            view = self.step_views[ctx.kernel.index] = make(ctx)
        return view

    def highlight(self, kernel: int, step: int, program: Sequence[int]) -> str | None:
        """Select a program in the Grid of kernel `kernel`: the workbench's Grid tab (its
        widget made now if the tab was not opened yet, so it opens on the program), else a
        Grid view already shown on its own. Returns where it was selected ("tab": the
        workbench's Grid tab, "view": a Grid view shown alone), None when nowhere."""
        wb = self.workbench
        if wb is None:
            return None
        selection = {"step": int(step), "program": [int(p) for p in program],
                     "source": "compare"}
        for i, ctx in enumerate(wb.contexts):
            if ctx.kernel.index != kernel or "grid" not in [t.name for t in wb.tabs(i)]:
                continue
            view = wb.view("grid", i)
            in_tab = self._tab_index(i, "grid") is not None
            if in_tab or "widget" in view.__dict__:
                view.widget.selection = selection
                return "tab" if in_tab else "view"
        return None

    def show_tab(self, kernel: int, name: str) -> bool:
        """Switch the shown workbench's tabs of kernel `kernel` to tab `name` (which builds its
        view, as a click would). False when the workbench widget is not shown or lacks it."""
        wb = self.workbench
        if wb is None:
            return False
        for i, ctx in enumerate(wb.contexts):
            if ctx.kernel.index != kernel:
                continue
            index = self._tab_index(i, name)
            if index is not None:
                self._tab_widget(i).selected_index = index
                return True
        return False

    def _tab_widget(self, i: int) -> Any:
        """The ipywidgets Tab of the workbench's `i`-th kernel, None when not shown."""
        wb = self.workbench
        if wb is None or "widget" not in wb.__dict__:  # only a workbench already shown
            return None
        boxes = wb.widget.children
        return boxes[i].children[-1] if i < len(boxes) else None

    def _tab_index(self, i: int, name: str) -> int | None:
        """Where tab `name` is among the shown tabs of the workbench's `i`-th kernel (the
        tabs were fixed when the widget was made: found by title)."""
        tabs = self._tab_widget(i)
        titles = list(getattr(tabs, "titles", ()) or ())
        title = next((t.title for t in self.workbench.tabs(i) if t.name == name), None)
        return titles.index(title) if title in titles else None


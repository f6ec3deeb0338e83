"""What the Compare and Step views of one capture share: the call to re-run, the comparison
(when one was made), the step views, and the workbench (to highlight a program in its Grid view).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pallaslab.model import Capture
from pallaslab.views.context import KernelContext

if TYPE_CHECKING:
    from pallaslab.execute import Comparison
    from pallaslab.views.step import StepView

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


@dataclasses.dataclass(eq=False)
class Session:
    """The Compare/Step state of one capture (one workbench)."""

    capture: Capture
    call: Call | None = None  # the user's own call; None: re-run the captured jaxpr
    comparison: Comparison | None = None
    step_views: dict[int, StepView] = dataclasses.field(default_factory=dict)
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

    @property
    def workbench(self) -> Any:
        return self.workbench_ref() if self.workbench_ref is not None else None

    def step_view(self, ctx: KernelContext) -> StepView:
        from pallaslab.views.step import StepView  # the Step view module imports this one

        view = self.step_views.get(ctx.kernel.index)
        if view is None:
            view = self.step_views[ctx.kernel.index] = StepView(ctx)
        return view

    def highlight(self, kernel: int, step: int, program: Sequence[int]) -> None:
        """Select a program in the workbench's Grid view (its live widget, if shown)."""
        wb = self.workbench
        if wb is None:
            return
        for i, ctx in enumerate(wb.contexts):
            if ctx.kernel.index != kernel or "grid" not in [t.name for t in wb.tabs(i)]:
                continue
            view = wb.view("grid", i)
            if "widget" in view.__dict__:  # only a grid already shown
                view.widget.selection = {"step": int(step),
                                         "program": [int(p) for p in program],
                                         "source": "compare"}


def session(capture: Capture) -> Session:
    """The session of a capture, made on first use. It lives in the capture's own `__dict__`
    (as a cached property would), so it goes when the capture goes."""
    s = capture.__dict__.get("_pallaslab_session")
    if s is None:
        s = capture.__dict__["_pallaslab_session"] = Session(capture)
    return s


def attach_workbench(wb: Any) -> Session:
    """Remember the workbench showing a capture (so Compare can highlight its Grid view)."""
    s = session(wb.capture)
    s.workbench_ref = weakref.ref(wb)
    return s

"""The Compare view: executors side by side, every mismatch traced to the program that wrote it.

Its payload is `compare_payload` (in `pallaslab.views.compare_payload`, re-exported here): error
heatmaps, mismatch masks and the mismatched blocks with their writer programs, the verdict, each
executor's status and what the runs found. This module opens a comparison on a workbench and
holds the view: the widget, and the text and static HTML forms.

The live widget sets `selection = {"action": "open", "program": [...], "nonce": ...}` when the
user opens a program: `CompareView.open` runs the kernel's stepper to that program, switches the
shown workbench to its Step tab, selects the program in its Grid tab, and says which of these
happened (`opened_note`).

Open it with `compare_workbench(wb, executors=..., reference=...)` (or `%%pallas --compare
interpret,reference=my_ref`); the workbench's Compare tab then shows that comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pallaslab.views._html import esc
from pallaslab.views.base import InteractiveView, View
from pallaslab.views.compare_payload import (
    ComparePayload,
    compare_payload,
    last_two,
    last_two_dims,
    outcome,
    run_status,
)
from pallaslab.views.compare_tree import compare_tree
from pallaslab.views.context import KernelContext
from pallaslab.views.parts import Section, to_html, to_text
from pallaslab.views.registry import register_tab
from pallaslab.views.session import Call, Session
from pallaslab.views.step import StepView

if TYPE_CHECKING:
    from pallaslab.execute import Comparison, OutputComparison

__all__ = [
    "ComparePayload",
    "CompareView",
    "attach_comparison",
    "compare_payload",
    "compare_workbench",
    "outcome",
    "run_status",
    "user_call",
]

STATIC_MAX_BLOCKS = 48  # static HTML draws block maps up to this many blocks per side


def _tuple(v: Sequence[int]) -> str:
    return f"({', '.join(map(str, v))}{',' if len(v) == 1 else ''})"


# --- opening a comparison on a workbench ---------------------------------------------------


def attach_comparison(wb: Any, comparison: Comparison | None = None, *,
                      executors: Sequence[str] | str | None = None,
                      reference: Callable[..., Any] | None = None, call: Call | None = None,
                      timeout: float | None = None, **options: Any) -> Comparison:
    """Compare the workbench's call under `executors` (or attach a ready `comparison`): its
    Compare tab shows it and its Step tab can run to the mismatches. `call` is the user's own
    `(fn, args, kwargs)` when known (the magic); else the captured function is re-run. Each
    run has a time limit of `timeout` seconds (None: the default, see
    `pallaslab.execute.worker.isolation`)."""
    s = wb.session
    if call is not None:
        s.call = call
    return _set_comparison(s, comparison, executors=executors, reference=reference,
                           timeout=timeout, **options)


def _set_comparison(s: Session, comparison: Comparison | None = None, *,
                    executors: Sequence[str] | str | None = None,
                    reference: Callable[..., Any] | None = None,
                    timeout: float | None = None, **options: Any) -> Comparison:
    from pallaslab.execute import compare

    if comparison is None:
        fn, args, kwargs = s.call_args()
        # none named: the API's one default (`choice.default_executors`), said in its notes
        comparison = compare(fn, *args, executors=executors or None, reference=reference,
                             timeout=timeout, **options, **kwargs)
    s.comparison = comparison
    for view in (*s.compare_views.values(), *s.step_views.values()):
        view._refresh()
    return comparison


def user_call(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
              ) -> Call | None:
    """The user's own call, when every argument holds arrays (so executors and a reference
    function can be called with it as written); None when some are static flags or sizes (then
    the captured function is re-run, and a reference gets the array arguments only)."""
    import jax

    def dynamic(v: Any) -> bool:
        leaves = jax.tree_util.tree_leaves(v)
        return bool(leaves) and all(isinstance(x, (jax.Array, np.ndarray, np.generic,
                                                   jax.ShapeDtypeStruct)) for x in leaves)

    if all(dynamic(a) for a in args) and all(dynamic(v) for v in kwargs.values()):
        return fn, tuple(args), dict(kwargs)
    return None


def compare_workbench(wb: Any, executors: Sequence[str] | str | None = None,
                      reference: Callable[..., Any] | None = None, kernel: int | str = 0,
                      timeout: float | None = None, **options: Any) -> View:
    """`wb.compare(executors=..., reference=...)`: run the comparison, return the Compare view
    of one kernel (options: `rtol`, `atol`, `seed`, `equal_nan`; `timeout` seconds per run)."""
    attach_comparison(wb, executors=executors, reference=reference, timeout=timeout, **options)
    view: View = wb.view("compare", kernel)
    return view


# --- the view --------------------------------------------------------------------------------


class CompareView(InteractiveView):
    """A comparison of executors, shown for one kernel of the workbench."""

    name = "compare"
    module = "compare.js"

    def __init__(self, ctx: KernelContext, comparison: Comparison | None = None):
        self.ctx = ctx
        self._comparison = comparison
        self.opened: tuple[int, ...] | None = None
        self.opened_note: str | None = None  # what opening it did (see `open`)
        self.error: str | None = None
        self._revision = 0

    @property
    def comparison(self) -> Comparison:
        if self._comparison is not None:
            return self._comparison
        s = self.ctx.session
        if s is None or s.comparison is None:
            raise LookupError("no comparison: run compare_workbench(wb, executors=...) first")
        return s.comparison

    def open(self, program: Sequence[int]) -> StepView:
        """Run the stepper to `program`, switch the shown workbench to its Step tab and select
        the program in its Grid tab; `opened_note` says which of these happened."""
        ids = tuple(int(p) for p in program)
        s = self.ctx.session
        assert s is not None
        step_view = s.step_view(self.ctx, StepView)
        step_view.goto(ids)
        self.error = step_view.error
        if self.error is None:
            self.opened = ids
            self.opened_note = self._open_note(s, step_view, ids)
        self._refresh()
        return step_view

    def _open_note(self, s: Session, step_view: StepView, ids: tuple[int, ...]) -> str:
        """Show the stepped program where the user looks, and say where that was (only)."""
        k = self.ctx.kernel.index
        head = (f"stepper at program {_tuple(ids)} "
                f"({step_view.stepper.position:,}/{step_view.tiling.programs:,} programs run)")
        places = []
        if s.show_tab(k, "step"):
            places.append("shown in the Step tab")
        grid = s.highlight(k, step_view.tiling.step_of(ids), ids)
        if grid is not None:
            places.append(f"selected in the Grid {grid}")
        return f"{head}: {' and '.join(places)}" if places else f"{head}; wb.step() shows it"

    def _refresh(self) -> CompareView:
        self._revision += 1
        self._push()
        return self

    def _payload(self, *, live: bool) -> ComparePayload:
        return compare_payload(self.comparison, self.ctx.kernel, self.ctx.tiling,
                               interactive=live, revision=self._revision, opened=self.opened,
                               opened_note=self.opened_note, error=self.error)

    def _tiling_of(self, out: OutputComparison) -> Any:
        """The tiling of the kernel that wrote `out` (this view's kernel only)."""
        return self.ctx.tiling if out.kernel == self.ctx.kernel.index else None

    def _on_selection(self, change: Mapping[str, Any]) -> None:
        sel = self._new_action(change)
        if sel is None or sel.get("action") != "open":
            return
        if sel.get("program") is not None:
            self.open(sel["program"])

    # --- static forms -------------------------------------------------------------------------

    def tree(self) -> Section:
        """The comparison as one tree (`compare_tree`): what the text and HTML forms render."""
        c = self.comparison
        k = self.ctx.kernel
        return compare_tree(c, f"Compare {', '.join(c.executors)} for kernel {k.index} "
                               f"{k.name}: {c.verdict()}", self.ctx.tiling, k.index)

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        c = self.comparison
        k = self.ctx.kernel
        kind = outcome(c)
        verdict = (f'<span class="{"pl-ok" if kind == "pass" else "pl-cmp-bad"} pl-cmp-verdict" '
                   f'data-outcome="{kind}">{esc(c.verdict())}</span>')
        head = (f'<h3 class="pl-title">Compare <code>{esc(k.name)}</code> '
                f'<span class="pl-dim">{esc(", ".join(c.executors))}</span> {verdict}</h3>')
        body = "".join(to_html(part) for part in self.tree().children)
        wrong = any(p.mismatched_blocks for out in c.outputs for p in out.pairs)
        maps = "".join(_static_maps(c, self.ctx)) if wrong else ""
        return f'<div class="pl-compare-static">{head}{body}{maps}</div>'


def _static_maps(c: Comparison, ctx: KernelContext) -> list[str]:
    """Per output with blocks: its blocks (last two dims), the mismatched ones marked."""
    maps = []
    for out in c.outputs:
        if not out.block_shape:
            continue
        ext = last_two(out.block_shape)
        shape2 = last_two_dims(out.shape)
        nb = [max(1, -(-s // max(e, 1))) for s, e in zip(shape2, ext, strict=True)]
        if nb[0] > STATIC_MAX_BLOCKS or nb[1] > STATIC_MAX_BLOCKS:
            continue
        bad = {last_two(b, pad=0) for p in out.pairs for b in p.mismatched_blocks}
        size = max(6, min(24, 320 // max(nb)))
        rects = "".join(
            f'<rect x="{col * size}" y="{r * size}" width="{size - 1}" height="{size - 1}" '
            f'class="{"pl-cmp-bad-block" if (r, col) in bad else "pl-cmp-ok-block"}">'
            f"<title>block ({r}, {col}){' mismatch' if (r, col) in bad else ''}</title></rect>"
            for r in range(nb[0]) for col in range(nb[1]))
        label = f"{out.origin}: blocks, mismatched ones marked"
        maps.append(f'<figure class="pl-map"><svg width="{nb[1] * size}" '
                    f'height="{nb[0] * size}" role="img" aria-label="{esc(label)}">{rects}'
                    f"</svg><figcaption>{esc(label)}</figcaption></figure>")
    return ['<div class="pl-maps">' + "".join(maps) + "</div>"] if maps else []


def _available(ctx: KernelContext) -> bool:
    return ctx.session is not None and ctx.session.comparison is not None


def _build(ctx: KernelContext, *, executors: Sequence[str] | str | None = None,
           reference: Callable[..., Any] | None = None, timeout: float | None = None,
           **options: Any) -> CompareView:
    """The Compare view of a kernel; with `executors` / `reference` (for a workbench that
    passes view options on: `wb.compare(executors=..., timeout=...)`), compare first."""
    s = ctx.session
    assert s is not None
    if executors is not None or reference is not None:
        _set_comparison(s, executors=executors, reference=reference, timeout=timeout,
                        **options)
    view = s.compare_views.get(ctx.kernel.index)
    if view is None or view.ctx is not ctx:
        view = s.compare_views[ctx.kernel.index] = CompareView(ctx)
    return view


register_tab("compare", order=55, title="Compare", available=_available, build=_build)

"""`pallaslab.inspect(fn, *args, **kwargs)`: the workbench over every kernel a call launches.

Displaying a Workbench shows one tabbed widget per kernel, a tab per registered view
(`pallaslab.views.registry`). `wb.grid()`, `wb.overview()` (and `wb.<tab>()` for any tab
registered later) return single views.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pallaslab.analysis import chips as chip_facts
from pallaslab.analysis.findings import Finding
from pallaslab.errors import PallasLabError, untested_jax_errors
from pallaslab.lowering.targets import TARGETS  # the one list of targets: the backend layer owns it
from pallaslab.model import Capture, Kernel, capture, select_kernel
from pallaslab.util.text import visible
from pallaslab.views import _html
from pallaslab.views.base import View, display_live_and_saved, html_fragment
from pallaslab.views.context import KernelContext
from pallaslab.views.registry import Tab, tab, tabs
from pallaslab.views.session import Call, Session


class WorkbenchError(PallasLabError, ValueError):
    """A workbench option (tab, chip, target, kernel) names something that does not exist."""


@untested_jax_errors  # on an untested JAX, pallaslab's own failure says which JAX
def inspect(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Workbench:
    """Capture every Pallas kernel `fn(*args, **kwargs)` launches and open a workbench on them.

    Nothing runs: the call is traced. Display the result in Jupyter, or use `wb.grid()`,
    `wb.overview()`, `wb.findings`, `wb.to_text()`. The Compare and Step tabs re-run this
    call (in the killable worker, so their time limits hold).

    Args:
        fn: the function that launches the kernels (a `pallas_call`, a library kernel, or any
            code calling them under `jit`, `vmap`, `scan`, `shard_map`, ...).
        *args: its arguments: arrays, or `jax.ShapeDtypeStruct`s to inspect without data.
        **kwargs: its keyword arguments; `chip="v6e"` is `capture`'s (the abstract TPU to trace
            under when tracing asks the chip).

    Returns:
        A `Workbench` with one context, and one tab per applicable view, per kernel.

    Raises:
        NoKernelError: the call launched no Pallas kernel.
        PallasLabError: the capture failed on pallaslab's account (see `capture`); the user's
            own exception while tracing propagates unwrapped. On a JAX pallaslab is not tested
            with, its own failure is an `UntestedJaxError` naming that JAX.
    """
    from pallaslab.views.compare import user_call

    cap = capture(fn, *args, **kwargs)
    own = {k: v for k, v in kwargs.items() if k != "chip"}  # `chip` is capture's
    return Workbench(cap, call=user_call(fn, args, own))


class Workbench:
    """Every kernel of a capture with its views, one tab per registered view.

    `call`: the user's own `(fn, args, kwargs)`, which Compare, Step and a trace on simulated
    devices re-run (None: the captured function). The workbench owns `session`, what its
    Compare and Step views share (the call, the comparison once run), and hands it to them in
    every context."""

    def __init__(self, cap: Capture, *, chips: Sequence[str] = (), targets: Sequence[str] = (),
                 tab: str | None = None, kernel: int | str | None = None,
                 options: Mapping[str, Any] | None = None, call: Call | None = None):
        self.capture = cap
        self.session = Session(cap, call=call, workbench_ref=weakref.ref(self))
        self.chips = tuple(_chip(c) for c in chips)
        self.targets = tuple(_target(t) for t in targets)
        self.initial_tab = tab_name(tab) if tab is not None else None
        # chosen now: a kernel that does not exist is the caller's error at once
        self._chosen = cap.kernels if kernel is None else (select_kernel(cap, kernel),)
        self.options = dict(options or {})  # extra `%%pallas` flags for later tabs

    @functools.cached_property
    def contexts(self) -> tuple[KernelContext, ...]:
        """One per kernel shown, made on first use: with `devices=N`, a kernel inside
        shard_map is the one traced on N simulated devices (see `views.device_contexts`), with
        the call the workbench was made with."""
        from pallaslab.views.device_contexts import kernel_contexts

        return kernel_contexts(self.capture, self._chosen, self.chips, self.targets,
                               self.options, self.session)

    # --- data ---------------------------------------------------------------------------

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return tuple(c.kernel for c in self.contexts)

    @property
    def findings(self) -> tuple[Finding, ...]:
        """Every finding of every kernel shown, in kernel order."""
        return tuple(f for c in self.contexts for f in c.findings)

    def context(self, kernel: int | str = 0) -> KernelContext:
        if isinstance(kernel, str):
            for c in self.contexts:
                if c.kernel.name == kernel:
                    return c
        elif -len(self.contexts) <= kernel < len(self.contexts):
            return self.contexts[kernel]
        shown = ", ".join(f"[{i}] {c.kernel.name}" for i, c in enumerate(self.contexts))
        raise WorkbenchError(f"no kernel {kernel!r} in this workbench; it shows: {shown}")

    def tabs(self, kernel: int | str = 0) -> tuple[Tab, ...]:
        """The tabs available for a kernel."""
        ctx = self.context(kernel)
        return tuple(t for t in tabs() if t.available(ctx))

    # --- views --------------------------------------------------------------------------

    def view(self, name: str, kernel: int | str = 0, **options: Any) -> View:
        """The view of tab `name` ("overview", "grid", ...) for one kernel.

        Options go to the tab's builder and replace the shown view, e.g.
        `wb.lowering(target="gpu-h100", compile=True)` or
        `wb.compare(executors=["interpret", "reference"], reference=ref)`; options can make a
        view available that is not by default (a comparison needs executors).
        """
        t = tab(tab_name(name))
        ctx = self.context(kernel)
        index = self.contexts.index(ctx)
        if options:
            view = t.build(ctx, **options)
            self.__dict__.setdefault("_views", {})[(t.name, index)] = view
            self._refresh_headers()  # e.g. a comparison just run: the verdict counts it
            return view
        if not t.available(ctx):
            raise WorkbenchError(f"the {t.title} view is not available for kernel "
                                 f"{visible(repr(ctx.kernel.name))}{_why(ctx, t)}")
        return _cached_view(self, t.name, index)

    def grid(self, kernel: int | str = 0) -> View:
        return self.view("grid", kernel)

    def overview(self, kernel: int | str = 0) -> View:
        return self.view("overview", kernel)

    def profile(self, kernel: int | str = 0, **options: Any) -> View:
        """The Pipeline view with the kernel profiled under jax.profiler beside the model."""
        return self.view("pipeline", kernel, profile=True, **options)

    def __getattr__(self, name: str) -> Callable[..., View]:
        # Tabs registered later (memory, pipeline, ...) are methods too: wb.memory(kernel=0).
        if not name.startswith("_"):
            with contextlib.suppress(KeyError):
                tab(name)
                return functools.partial(self.view, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- rendering ----------------------------------------------------------------------

    def to_text(self) -> str:
        parts = []
        for i in range(len(self.contexts)):
            parts.append("\n".join(self.view(t.name, i).to_text() for t in self.tabs(i)))
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        names = ", ".join(visible(k.name) for k in self.kernels)
        return (f"<Workbench {visible(self.capture.function_name)}: {len(self.contexts)} kernel(s) "
                f"[{names}], {len(self.findings)} finding(s)>")

    def to_html(self) -> str:
        sections = []
        for i, ctx in enumerate(self.contexts):
            body = "".join(f'<section class="pl-tab-static">{self.view(t.name, i).to_html()}'
                           "</section>" for t in self.tabs(i))
            sections.append(f'<div class="pl-kernel"><div class="pl-wb-header">'
                            f"{_header_html(ctx)}</div>{body}</div>")
        return "".join(sections)

    def report(self, title: str | None = None) -> str:
        """The self-contained HTML report (what `pallaslab report` writes)."""
        from pallaslab.views.report import report_html

        return report_html(self.contexts, title or self.capture.function_name)

    def save_report(self, path: str | Path, title: str | None = None) -> Path:
        out = Path(path)
        out.write_text(self.report(title), encoding="utf-8")
        return out

    @functools.cached_property
    def widget(self) -> Any:
        """The live widget: per kernel a header and an ipywidgets Tab, tabs built on first view."""
        try:
            import ipywidgets as w
        except ImportError as err:
            from pallaslab.errors import missing

            raise missing("the pallaslab workbench widget", "ipywidgets", "notebook") from err
        boxes = []
        for i, ctx in enumerate(self.contexts):
            available = self.tabs(i)
            header = w.HTML(_header_html(ctx))
            header.add_class("pl-wb-header")
            tab_widget = w.Tab(children=[w.Box() for _ in available])
            tab_widget.titles = tuple(t.title for t in available)
            names = [t.name for t in available]
            start = names.index(self.initial_tab) if self.initial_tab in names else \
                (names.index("grid") if "grid" in names else 0)

            def fill(change: Any, tab_widget: Any = tab_widget, names: list[str] = names,
                     i: int = i) -> None:
                index = change["new"] if isinstance(change, dict) else change
                if index is None:
                    return
                box = tab_widget.children[index]
                if not box.children:
                    box.children = (self.view(names[index], i).widget,)

            fill(start)
            tab_widget.selected_index = start
            tab_widget.observe(fill, names="selected_index")
            boxes.append(w.VBox([header, tab_widget]))
        return w.VBox(boxes)

    def _refresh_headers(self) -> None:
        """Re-state each shown kernel's verdict (a comparison may have been run since)."""
        if "widget" not in self.__dict__:
            return
        for box, ctx in zip(self.widget.children, self.contexts, strict=True):
            box.children[0].value = _header_html(ctx)

    def _ipython_display_(self) -> None:
        # the live widget, then its static copy for when the notebook is saved and reopened
        display_live_and_saved(lambda: self.widget, self.to_text, self.to_html)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": self.to_text(),
                                  "text/html": html_fragment(self.to_html())}
        with contextlib.suppress(ImportError):
            data = self.widget._repr_mimebundle_()
            data = data[0] if isinstance(data, tuple) else data
            bundle.update({k: v for k, v in (data or {}).items() if k != "text/plain"})
        return bundle


def _cached_view(wb: Workbench, name: str, index: int) -> View:
    cache = wb.__dict__.setdefault("_views", {})
    key = (name, index)
    if key not in cache:
        cache[key] = tab(name).build(wb.contexts[index])
    return cache[key]


@dataclasses.dataclass(frozen=True)
class HeaderVerdict:
    """A kernel's verdict in its workbench header: the static analysis's findings, plus what
    the runs shown in its tabs found (the comparison's, or the run on simulated devices)."""

    findings: int  # the static analysis's findings (all severities)
    errors: int  # error findings: the static analysis's and the runs'
    problems: tuple[str, ...] = ()  # the comparison's failures: "MISMATCH", "incomplete"
    compared: bool = False  # a comparison ran

    @property
    def ok(self) -> bool:
        return not self.errors and not self.problems

    @property
    def status(self) -> str:
        parts = [f"{self.errors} error(s)"] if self.errors else []
        parts += [f"compare: {p}" for p in self.problems]
        if self.ok:
            return "no errors · compare: all close" if self.compared else "no errors"
        return " · ".join(parts)


def header_verdict(ctx: KernelContext) -> HeaderVerdict:
    """The header's verdict of one kernel: its static errors, and, when a comparison (or a run
    on simulated devices) was made for the workbench, that run's errors and failures."""
    static_errors = sum(1 for f in ctx.findings if f.severity == "error")
    s = ctx.session
    comparison = s.comparison if s is not None else None
    if comparison is not None:
        run_errors = sum(1 for r in comparison.results for f in r.findings
                         if f.severity == "error")
        problems = (("MISMATCH",) if comparison.outcome == "mismatch" else ()) + \
            (() if comparison.complete else ("incomplete",))
        return HeaderVerdict(len(ctx.findings), static_errors + run_errors, problems, True)
    run = s.device_run if s is not None else None
    run_errors = sum(1 for f in run.findings if f.severity == "error") if run is not None else 0
    return HeaderVerdict(len(ctx.findings), static_errors + run_errors)


def _header_html(ctx: KernelContext) -> str:
    k = ctx.kernel
    grid = " × ".join("?" if g is None else str(g) for g in k.grid) or "()"
    verdict = header_verdict(ctx)
    color = "var(--jp-success-color1, #388e3c)" if verdict.ok else "var(--jp-error-color1, #d32f2f)"
    status = (f'<span class="pl-verdict" data-ok="{str(verdict.ok).lower()}" '
              f'style="color: {color}">{_html.esc(verdict.status)}</span>')
    return (f'<b>kernel {k.index}: <code>{_html.esc(k.name)}</code></b> '
            f'<span style="color: var(--jp-ui-font-color2, #616161)">grid {_html.esc(grid)} · '
            f"{verdict.findings} finding(s) · </span>{status}")


def _why(ctx: KernelContext, t: Tab) -> str:
    reason = unavailable_reason(ctx, t)
    return f": {reason}" if reason else ""


def unavailable_reason(ctx: KernelContext, t: Tab) -> str | None:
    """Why tab `t` is not available for a kernel, in the tab's own terms (None: no known
    reason). Each tab has its own condition (`Tab.available`); this names it."""
    from pallaslab.analysis.occupancy import applies
    from pallaslab.analysis.tiling import tiling_unavailable_reason

    k = ctx.kernel
    if t.name == "compare":
        return ("no comparison has been run for it: wb.compare(executors=\"interpret,reference\""
                ", reference=my_ref) runs one (or `%%pallas --compare interpret,reference=my_ref`)")
    if t.name == "lowering":
        return "the capture holds no handle to lower the kernel again"
    if t.name not in ("grid", "memory", "pipeline", "step"):
        return None  # a tab registered elsewhere: its own condition, unknown here
    if t.name == "step" and k.kind == "mesh":
        from pallaslab.execute.stepping.core_stepper import talking_cores

        if (talking := talking_cores(k)) is not None:
            return (f"its cores signal each other (at {visible(talking)}), so they step "
                    "together, not one program at a time: pallaslab.step(fn, *args) steps "
                    "them core by core under tpu-interpret")
    if k.kind != "pallas_call":
        return tiling_unavailable_reason(k)  # mesh kernels have no BlockSpecs to tile
    backend = visible(str(k.backend))
    if t.name == "memory":
        return None if applies(k) or k.backend == "triton" else (
            f"it is a {backend} kernel: the Memory view shows TPU VMEM/SMEM occupancy and "
            "Triton resources")
    if t.name == "pipeline" and ctx.targets and all(x.startswith("gpu-") for x in ctx.targets):
        return ("only GPU targets were asked for (" + ", ".join(ctx.targets) + "): the Pipeline "
                "view models the TPU software pipeline")
    if t.name == "pipeline" and not applies(k):
        return f"it is a {backend} kernel: the Pipeline view models the TPU software pipeline"
    if t.name == "step":
        from pallaslab.views.step import LOOP_CONTEXTS

        if ctx.capture is None:
            return "the kernel was shown without its capture, so there is no call to run"
        loops = [c for c in k.context if any(loop in c.lower() for loop in LOOP_CONTEXTS)]
        if loops and tiling_unavailable_reason(k) is None:
            return (f"it runs inside {visible(' > '.join(k.context))}, where the call may not "
                    "launch it once: step its first launch with pallaslab.step(fn, *args)")
    return tiling_unavailable_reason(k)


def tab_name(name: str) -> str:
    key = name.strip().lower()
    try:
        return tab(key).name
    except KeyError:
        known = ", ".join(t.name for t in tabs())
        raise WorkbenchError(f"unknown tab {name!r}: the tabs are {known}") from None


def _chip(name: str) -> str:
    try:
        return chip_facts.normalize(name)
    except ValueError as err:
        raise WorkbenchError(str(err)) from None


def _target(name: str) -> str:
    key = name.strip().lower()
    if key not in TARGETS:
        raise WorkbenchError(f"unknown target {name!r}: the targets are {', '.join(TARGETS)}")
    return key

"""The Lowering view: a kernel's IR per target and stage, mapped line by line to its Python.

Its payload is `lowering_payload` (in `pallaslab.views.lowering_payload`, re-exported here).
The live widget asks for what the payload left out (it sets `selection.stage` /
`selection.target`; `LoweringView` lowers and re-sends), the static report embeds what fits.
The default is cheap: one cross-lowering for the kernel's default target and no compile until
asked for. This module holds the view: the widget's requests; its text and static HTML render
the one tree `lowering_tree` builds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pallaslab.errors import PallasLabError, UnavailableError
from pallaslab.views._html import esc
from pallaslab.views.base import InteractiveView
from pallaslab.views.context import KernelContext
from pallaslab.views.lowering_payload import (
    LIVE_BUDGET,
    STAGE_TEXT_CAP,
    STATIC_BUDGET,
    LoweringPayload,
    cap_text,
    clean_lowering,
    default_target,
    lowering_payload,
    payload_nbytes,
)
from pallaslab.views.lowering_tree import lowering_tree
from pallaslab.views.parts import Section, to_html, to_text
from pallaslab.views.registry import register_tab

if TYPE_CHECKING:
    from pallaslab.lowering import KernelLowering

__all__ = ["LIVE_BUDGET", "STAGE_TEXT_CAP", "STATIC_BUDGET", "LoweringPayload", "LoweringView",
           "cap_text", "clean_lowering", "default_target", "lowering_payload", "payload_nbytes"]

# --- the view ---------------------------------------------------------------------------------


class LoweringView(InteractiveView):
    """The lowered IR of one kernel, stage by stage, beside its Python source."""

    name = "lowering"
    module = "lowering.js"

    def __init__(self, ctx: KernelContext, target: str | None = None, compile: bool = False):
        from pallaslab.lowering import get_target

        self.ctx = ctx
        self.compile = compile
        self.target = get_target(target or default_target(ctx.kernel, ctx.targets)).name
        self.stage: str | None = None
        self.error: str | None = None
        self._results: dict[str, KernelLowering] = {}
        self._sent: set[tuple[str, str]] = set()
        self._revision = 0
        self._answered: str | None = None  # the last widget request answered

    # --- data ---------------------------------------------------------------------------

    def result(self, target: str | None = None, *, compile: bool | None = None
               ) -> KernelLowering:
        """The kernel lowered (and compiled, when asked) for `target`; lowered once per view."""
        from pallaslab.lowering import get_target, lower_kernel

        name = get_target(target or self.target).name
        want_compile = self.compile if compile is None else compile
        have = self._results.get(name)
        if have is None or (want_compile and not have.compiled):
            # a shard_map kernel compiles over as many chips as the workbench runs devices
            devices = self.ctx.options.get("devices")
            count = int(devices) if devices else None
            if self.ctx.kernel.handle is None:  # traced on N devices, in their worker
                lowered = self._lowered_on_devices(name, count, want_compile)
            elif want_compile and self._joined_by_semaphores():
                lowered = self._lowered_with_its_group(name, count)
            else:
                lowered = lower_kernel(self.ctx.kernel, get_target(name), compile=want_compile,
                                       devices=count)
            self._results[name] = clean_lowering(lowered)
        return self._results[name]

    def _joined_by_semaphores(self) -> bool:
        """A kernel passing a DMA semaphore to another kernel compiles only together with it."""
        return self.ctx.capture is not None and any(
            op.is_semaphore and op.role != "scratch" for op in self.ctx.kernel.operands)

    def _lowered_on_devices(self, target: str, devices: int | None,
                            compile: bool) -> KernelLowering:
        """A kernel traced on N simulated devices (no handle here): lowered where it was
        traced, by the worker that has those devices."""
        from pallaslab.execute.device_trace import lower_on_devices

        s = self.ctx.session
        assert s is not None and self.ctx.capture is not None and devices is not None
        call = s.traceable_call()
        if call is None:
            raise UnavailableError("the capture keeps no call to trace again on "
                               f"{devices} devices")
        fn, args, kwargs = call
        position = [k.index for k in self.ctx.capture].index(self.ctx.kernel.index)
        got = lower_on_devices(fn, args, kwargs, devices=devices, position=position,
                               target=target, compile=compile,
                               chip=self.ctx.kernel.traced_for_chip)
        if isinstance(got, str):
            raise UnavailableError(
                f"lowering {self.ctx.kernel.name} on {devices} devices: {got}")
        return got

    def _lowered_with_its_group(self, target: str, devices: int | None) -> KernelLowering:
        from pallaslab.lowering import lower

        assert self.ctx.capture is not None
        result = lower(self.ctx.capture, target=target, compile=True, devices=devices)
        position = [k.index for k in self.ctx.capture].index(self.ctx.kernel.index)
        return result.kernels[position]

    @property
    def results(self) -> dict[str, KernelLowering]:
        """Every target lowered so far (the default one on first use)."""
        if self.target not in self._results and self.error is None:
            try:
                self.result()
            except PallasLabError as err:  # shown in the view instead of breaking the workbench
                self.error = str(err)
        return dict(self._results)

    def select(self, target: str | None = None, stage: str | None = None,
               compile: bool | None = None) -> LoweringView:
        """Show another target / stage (lowering it first); updates the live widget."""
        self.error = None
        try:
            self.result(target, compile=compile)
            if target is not None:
                self.target = _target_name(target)
        except PallasLabError as err:  # e.g. `pip install "pallaslab[tpu]"` for --compile
            self.error = str(err)
        self.stage = stage
        self._revision += 1
        self._push()
        return self

    def _payload(self, *, live: bool) -> LoweringPayload:
        p = lowering_payload(self.ctx.kernel, self.results, self.target, stage=self.stage,
                             interactive=live, budget=LIVE_BUDGET if live else STATIC_BUDGET,
                             error=self.error, revision=self._revision,
                             answered=self._answered if live else None,
                             asked=self.ctx.targets)
        self.stage = p["stage"]
        if live:
            self._sent = {(t, s["name"]) for t, low in p["lowerings"].items()
                          for s in low["stages"] if s["text"] is not None}
        return p

    def _on_selection(self, change: Mapping[str, Any]) -> None:
        """The widget asks for a target, a stage's text or a compile. Every request
        (`selection.request`, a fresh id each time) gets exactly one answer — a payload with
        `answered` set to it — even when there is nothing new to lower (the target shown
        re-selected, a compile already done) or the lowering fails (the answer carries the
        error), so the widget never waits for ever."""
        sel = change["new"] or {}
        request = sel.get("request")
        target = sel.get("target") or self.target
        stage = sel.get("stage")
        have = self._results.get(target)
        compile = bool(sel.get("compile")) and not (have is not None and have.compiled)
        work = target != self.target or compile or (
            stage is not None and (target, stage) not in self._sent)
        if request is not None:
            if request == self._answered:
                return
            self._answered = str(request)
        if not work and request is None:
            return
        try:
            if work:
                self.select(target, stage, compile=True if compile else None)
            else:  # nothing to lower: answer with what is there
                self.stage = stage or self.stage
                self._revision += 1
                self._push()
        except Exception as err:  # a bug must not leave the widget waiting forever
            self.error = f"lowering for {target} failed: {type(err).__name__}: {err}"
            self._revision += 1
            self.widget.payload = self._payload(live=True)
            raise

    # --- static forms -------------------------------------------------------------------

    def tree(self) -> Section:
        """The lowerings so far as one tree (`lowering_tree`): what the text and HTML render."""
        k = self.ctx.kernel
        results = self.results
        return lowering_tree(k.index, k.name, results, kernel=k,
                             error=(self.target, self.error) if self.error else None)

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        k = self.ctx.kernel
        head = f'<h3 class="pl-title">Lowering <code>{esc(k.name)}</code></h3>'
        return head + "".join(to_html(part) for part in self.tree().children)


def _target_name(target: str) -> str:
    from pallaslab.lowering import get_target

    return get_target(target).name


def _available(ctx: KernelContext) -> bool:
    # lowering re-binds the captured kernel, or re-traces the capture on N devices
    return ctx.kernel.handle is not None or (ctx.traced_on_devices is not None
                                             and ctx.capture is not None)


register_tab("lowering", order=70, title="Lowering", available=_available, build=LoweringView)

"""The Devices view: a kernel inside shard_map, run on several (simulated) devices, seen device
by device — a lane per device, each DMA an arrow from the sending device to the receiving one
(its bytes, the ring step it belongs to, its source line on hover), each semaphore signal and
completed wait a tick on its device's lane, in the order TPU interpret mode ran them.

The record comes from a tpu-interpret run on N devices (`RunResult.device_record`): the
comparison's (`%%pallas --compare tpu-interpret,... --devices 4`,
`wb.compare(..., devices=4)`), or a run given to the view
(`wb.view("devices", result=pallaslab.run(fn, *args, devices=4))`), or one the view makes
from the user's own call when the magic has it.
"""

from __future__ import annotations

import functools
from typing import Any, TypedDict

from pallaslab.execute.registry import executor_of_mode
from pallaslab.execute.result import RunResult
from pallaslab.model import Kernel
from pallaslab.model.devices import DeviceRecord
from pallaslab.views import _html
from pallaslab.views._html import esc, visible_payload
from pallaslab.views.base import View
from pallaslab.views.context import KernelContext
from pallaslab.views.names import semaphore_name, source_name
from pallaslab.views.overview_tree import findings_lines
from pallaslab.views.parts import (
    Code,
    Line,
    Markup,
    Part,
    Section,
    Table,
    Text,
    to_html,
    to_text,
)
from pallaslab.views.registry import register_tab

DEFAULT_DEVICES = 4
MAX_EVENTS = 5_000  # arrows and ticks sent to the widget (the text lists them all)


class TransferEntry(TypedDict):
    seq: int
    src: int
    dst: int
    bytes: int
    step: int
    remote: bool
    source: str | None
    buffers: str  # "hbm #100 -> hbm #101"


class SemaphoreEntry(TypedDict):
    seq: int
    kind: str  # "signal" | "wait"
    device: int
    semaphore: int
    name: str  # the body's name for it, "local_sem (scratch[0])" ("#2000" when it has none)
    amount: int
    source: str | None


class DevicesPayload(TypedDict):
    version: int
    kernel: str
    index: int
    devices: int
    transfers: list[TransferEntry]
    semaphores: list[SemaphoreEntry]
    events: int  # seq of the last event + 1: the time axis
    remote_bytes: int
    summary: str  # "16 DMAs: 12 between devices (49,152 B), 4 local copies (16,384 B)"
    status: str | None  # the run's status ("ran", "failed", ...)
    error: str | None
    findings: list[dict[str, Any]]
    note: str | None


def devices_payload(kernel_name: str, index: int, result: RunResult | None,
                    note: str | None = None, kernel: Kernel | None = None) -> DevicesPayload:
    record = result.device_record if result is not None else None
    if record is None:
        record = DeviceRecord(0, (), ())
    transfers = [TransferEntry(seq=t.seq, src=t.src_device, dst=t.dst_device, bytes=t.nbytes,
                               step=t.step, remote=t.remote, source=source_name(t.source, kernel),
                               buffers=f"{t.src_buffer} -> {t.dst_buffer}")
                 for t in sorted(record.transfers, key=_ring_order)[:MAX_EVENTS]]
    semaphores = [SemaphoreEntry(seq=s.seq, kind=s.kind, device=s.device, semaphore=s.semaphore,
                                 name=semaphore_name(kernel, s.semaphore) or f"#{s.semaphore}",
                                 amount=s.amount, source=source_name(s.source, kernel))
                  for s in record.semaphores[:MAX_EVENTS]]
    last = max([t["seq"] for t in transfers] + [s["seq"] for s in semaphores], default=-1)
    if record.truncated:
        note = (note + " " if note else "") + "The record stopped at its size limit."
    return visible_payload(DevicesPayload(
        version=1, kernel=kernel_name, index=index, devices=record.num_devices,
        transfers=transfers, semaphores=semaphores, events=last + 1,
        remote_bytes=record.remote_bytes(), summary=dma_summary(record),
        status=result.status if result else None,
        error=run_error(result), findings=[f.to_json() for f in result.findings] if result else [],
        note=note))


def _ring_order(t: Any) -> tuple[int, bool, int, int]:
    # Step by step; within a step the local copies first, then each device's send in device
    # order (the order the DMAs were recorded in is the interpreter's, not the ring's).
    return t.step, t.remote, t.src_device, t.seq


def dma_summary(record: DeviceRecord) -> str:
    """The DMAs counted as their bytes are: those between devices apart from the local copies
    (a ring's own-shard copy), each with its own count and bytes."""
    remote = [t.nbytes for t in record.transfers if t.remote]
    local = [t.nbytes for t in record.transfers if not t.remote]
    parts = [f"{len(remote)} between devices ({_html.num(sum(remote))} B)"]
    if local:
        parts.append(f"{len(local)} local {'copy' if len(local) == 1 else 'copies'} "
                     f"({_html.num(sum(local))} B)")
    return f"{len(record.transfers)} DMAs: " + ", ".join(parts)


def run_error(result: RunResult | None) -> str | None:
    """Why the run did not finish, unless a finding already says it (a deadlock)."""
    if result is None or result.status == "ran":
        return None
    why = result.error or result.reason
    said = {f"{f.code}: {f.message}" for f in result.findings}
    return None if why in said else why


class DevicesView(View):
    """Lanes per device with the DMAs between them and the semaphore signals and waits."""

    name = "devices"
    module = "devices.js"

    def __init__(self, ctx: KernelContext, result: RunResult | None = None,
                 devices: int | None = None, timeout: float | None = None):
        self.ctx = ctx
        self.devices = devices or int(ctx.options.get("devices") or DEFAULT_DEVICES)
        self.timeout = timeout
        if result is not None:
            self.__dict__["run"] = result

    @functools.cached_property
    def run(self) -> RunResult | None:
        """The TPU interpret mode run on several devices to show (None: none could be made)."""
        s = self.ctx.session
        comparison = s.comparison if s is not None else None
        on_devices = executor_of_mode("tpu")  # the executor that runs several devices
        if comparison is not None and on_devices in comparison.executors:
            ran = comparison.result(on_devices)
            if ran.device_record is not None:
                return ran
        if s is not None and s.device_run is not None and s.device_run.device_record:
            return s.device_run
        if s is None or s.call is None:  # the captured trace has this process's device count
            return None
        from pallaslab.execute import run

        fn, args, kwargs = s.call
        return run(fn, *args, executor=on_devices, devices=self.devices,
                   timeout=self.timeout, **kwargs)

    def _payload(self) -> DevicesPayload:
        k = self.ctx.kernel
        note = None if self.run is not None else (
            "no run on several devices yet: run the kernel there, e.g. "
            f"wb.view(\"devices\", result=pallaslab.run(fn, *args, devices={self.devices})), "
            f"or %%pallas --devices {self.devices}")
        return devices_payload(k.name, k.index, self.run, note, kernel=k)

    def payload(self) -> dict[str, Any]:
        return dict(self._payload())

    def tree(self) -> Section:
        """The run as one tree (`devices_tree`): what the text and HTML forms render."""
        return devices_tree(self._payload())

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        return to_html(self.tree())


def devices_tree(p: DevicesPayload) -> Section:
    """The heading and summary, why there is no run or why it failed, its findings, the lanes
    (HTML only), the DMAs in ring-step order and the semaphore events counted."""
    children: list[Part] = [Line((Text(m, "dim"),), css="pl-dim")
                            for m in (p["note"], p["error"]) if m]
    children += findings_lines(p["findings"]) if p["findings"] else []
    if svg := lanes_svg(p):
        children.append(Markup(svg))
    rows = tuple((str(t["step"]), f"device {t['src']}", f"device {t['dst']}{_local(t)}",
                  _html.num(t["bytes"]), t["buffers"], t["source"] or "?")
                 for t in p["transfers"])
    children.append(Table(("step", "from", "to", "bytes", "buffers", "source"), rows,
                          numeric=(0, 3)))
    children.append(Line((semaphores_line(p["semaphores"]),)))
    return Section(("Devices of kernel ", f"{p['index']} ", Code(p["kernel"]),
                    f": {p['devices']} devices, {p['summary']} (in ring-step order)"),
                   tuple(children), css="pl-devices")


def semaphores_line(semaphores: list[SemaphoreEntry]) -> str:
    signals = sum(s["kind"] == "signal" for s in semaphores)
    return f"semaphores: {signals} signals, {len(semaphores) - signals} completed waits"


def _local(t: TransferEntry) -> str:
    return "" if t["remote"] else " (local)"


def lanes_svg(p: DevicesPayload, width: int = 640, lane: int = 28) -> str:
    """A lane per device; DMAs as arrows between lanes, semaphore events as ticks."""
    n, events = p["devices"], max(p["events"], 1)
    if not n:
        return ""
    height = lane * n + 8

    def x(seq: int) -> float:
        return 70 + (width - 80) * seq / events

    parts = [f'<text x="4" y="{lane * d + lane / 2 + 8}" class="pl-dim">device {d}</text>'
             f'<line x1="70" x2="{width - 10}" y1="{lane * d + lane / 2 + 4}" '
             f'y2="{lane * d + lane / 2 + 4}" stroke="currentColor" stroke-opacity="0.2"/>'
             for d in range(n)]
    for s in p["semaphores"]:
        y = lane * s["device"] + lane / 2 + 4
        parts.append(f'<line x1="{x(s["seq"]):.1f}" x2="{x(s["seq"]):.1f}" y1="{y - 5}" '
                     f'y2="{y + 5}" class="pl-dev-{s["kind"]}" stroke="currentColor"><title>'
                     f'{esc(s["kind"])} semaphore {esc(s["name"])} ({s["amount"]}) '
                     f'{esc(s["source"] or "")}</title></line>')
    for t in p["transfers"]:
        y1, y2 = (lane * d + lane / 2 + 4 for d in (t["src"], t["dst"]))
        parts.append(f'<line x1="{x(t["seq"]) - 6:.1f}" y1="{y1}" x2="{x(t["seq"]):.1f}" '
                     f'y2="{y2}" stroke="currentColor" stroke-width="1.5" '
                     f'marker-end="url(#pl-arrow)"><title>step {t["step"]}: device {t["src"]} '
                     f'-> device {t["dst"]}, {t["bytes"]} B, {esc(t["buffers"])} '
                     f'{esc(t["source"] or "")}</title></line>')
    marker = ('<defs><marker id="pl-arrow" viewBox="0 0 6 6" refX="5" refY="3" markerWidth="6" '
              'markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="currentColor"/>'
              "</marker></defs>")
    return (f'<svg class="pl-devices-lanes" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{marker}{"".join(parts)}</svg>')


def _available(ctx: KernelContext) -> bool:
    return ctx.kernel.device_mesh is not None  # inside shard_map


register_tab("devices", order=55, title="Devices", available=_available, build=DevicesView)

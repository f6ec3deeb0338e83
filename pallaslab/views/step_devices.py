"""The Step tab of a kernel inside shard_map opened with `devices=N`: the function stepped on N
simulated devices by a `pallaslab.execute.stepping.device_stepper.DeviceStepper` (TPU interpret
mode in the worker process, every device paused at each program start).

"step all devices" lets every device run one more program (lockstep); "step device d" lets one
device alone run one (after a first lockstep step: a device's threads are known by its first
program). Each step shows, per device, the programs it started and whether it waits at its next
program, is blocked inside one (on a semaphore or a DMA another device has yet to send) or has
finished; the DMAs sent and not landed (in flight), the DMAs landed and the semaphore events so
far; and, once the run ends, its status and findings (a `deadlock` when every device waits for
a signal no one sends).

The widget (`step_devices.js`) sets `selection = {"action": "step" | "step_device" | "run" |
"reset", "device": d, "nonce": ...}` and `DeviceStepView` answers with a new payload. The
payload keeps the latest `MAX_STEP_EVENTS` transfers and semaphore events (with their totals).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

from pallaslab.errors import PallasLabError
from pallaslab.views._html import visible_payload
from pallaslab.views.base import InteractiveView
from pallaslab.views.context import KernelContext
from pallaslab.views.devices import (
    DevicesPayload,
    SemaphoreEntry,
    TransferEntry,
    lanes_svg,
    run_error,
)
from pallaslab.views.names import semaphore_name, source_name
from pallaslab.views.parts import Section, to_html, to_text
from pallaslab.views.session import Call
from pallaslab.views.step_tree import device_step_tree

if TYPE_CHECKING:
    from pallaslab.execute.stepping.device_stepper import DeviceStepper, DeviceStepSnapshot
    from pallaslab.model import Kernel
    from pallaslab.model.devices import Transfer

PAYLOAD_VERSION = 1
MAX_STEP_EVENTS = 200  # the latest transfers and semaphore events sent (totals say how many)
MAX_IN_FLIGHT = 200
STATUSES = ("not started", "waiting", "blocked", "busy", "finished", "stopped")
_DEADLOCKED = re.compile(r"device (\d+) \(core \d+\) waits")


class DeviceRow(TypedDict):
    device: int
    programs: int  # programs started (a blocked device: including the one it is in)
    total: int | None  # programs each device runs (every kernel of the call), None: unknown
    status: str  # one of STATUSES
    detail: str  # the status in words
    sent: int  # DMAs landed that this device sent to another device
    received: int  # ... that another device sent to it
    in_flight: int  # DMAs it sent that have not landed
    signals: int
    waits: int  # completed semaphore waits


class StepDevicesPayload(TypedDict):
    version: int
    kind: str  # "devices": the Step tab stepping N devices
    kernel: str
    index: int
    devices: int
    started: bool
    position: int  # lockstep steps taken
    done: bool
    last: str | None  # what the last step did ("every device ran one more program", ...)
    rows: list[DeviceRow]
    in_flight: list[TransferEntry]  # dst -1: not known yet
    transfers: list[TransferEntry]  # the latest MAX_STEP_EVENTS that landed, in order
    transfers_total: int
    new_transfers: int  # how many of the transfers shown landed in the last step
    semaphores: list[SemaphoreEntry]  # the latest MAX_STEP_EVENTS
    semaphores_total: int
    events: int  # the lanes' time axis: the last event's seq + 1 ...
    start: int  # ... from the first event shown (the latest events are sent)
    status: str | None  # the run's status once it ended ("ran", "failed", ...)
    findings: list[dict[str, Any]]
    error: str | None
    notes: list[str]
    interactive: bool
    revision: int


def _transfer(t: Transfer, kernel: Kernel | None) -> TransferEntry:
    return TransferEntry(seq=t.seq, src=t.src_device, dst=t.dst_device, bytes=t.nbytes,
                         step=t.step, remote=t.remote, source=source_name(t.source, kernel),
                         buffers=f"{t.src_buffer} -> {t.dst_buffer}")


def programs_per_device(grids: Sequence[Sequence[int | None]]) -> int | None:
    """Programs each device starts: every kernel's grid (as traced on the N devices)."""
    if not grids or any(g is None for grid in grids for g in grid):
        return None
    return sum(math.prod(cast(Sequence[int], grid)) for grid in grids)


def device_rows(snap: DeviceStepSnapshot | None, devices: int) -> list[DeviceRow]:
    """Each device's programs and status, from the stepped run (pure)."""
    total = programs_per_device(snap.grids) if snap is not None else None
    blocked_at_end: set[int] = set()
    if snap is not None and snap.result is not None:
        for f in snap.result.findings:
            if f.code == "deadlock":
                blocked_at_end |= {int(d) for d in _DEADLOCKED.findall(f.message)}
    rows = []
    for d in range(devices):
        programs = snap.programs.get(d, 0) if snap is not None else 0
        of = f"/{total}" if total is not None else ""
        if snap is None or (snap.position == 0 and not snap.done):
            status, detail = "not started", "no program started yet"
        elif snap.done:
            ran = snap.result is not None and snap.result.status == "ran"
            if ran:
                status, detail = "finished", f"ran {programs}{of} programs; the run ended"
            elif d in blocked_at_end:
                status, detail = "blocked", (f"blocked in program {programs}{of} when the run "
                                             "stopped: it waits for a signal no one sends")
            else:
                status, detail = "stopped", f"the run stopped after {programs}{of} programs"
        elif d not in snap.busy:
            status, detail = "waiting", f"at the start of program {programs + 1}{of}"
        elif total is not None and programs >= total:
            status, detail = "busy", (f"in its last program ({programs}{of}), or past it and "
                                      "waiting for the other devices to finish")
        else:
            status, detail = "blocked", (f"inside program {programs}{of}: waits on a semaphore "
                                         "or a DMA another device has yet to send")
        transfers = snap.transfers if snap is not None else ()
        semaphores = snap.semaphores if snap is not None else ()
        rows.append(DeviceRow(
            device=d, programs=programs, total=total, status=status, detail=detail,
            sent=sum(t.remote and t.src_device == d for t in transfers),
            received=sum(t.remote and t.dst_device == d for t in transfers),
            in_flight=sum(t.src_device == d for t in (snap.in_flight if snap else ())),
            signals=sum(s.kind == "signal" and s.device == d for s in semaphores),
            waits=sum(s.kind == "wait" and s.device == d for s in semaphores)))
    return rows


def step_devices_payload(kernel_name: str, index: int, devices: int,
                         snap: DeviceStepSnapshot | None, *, landed_before: int = 0,
                         last: str | None = None, interactive: bool = False, revision: int = 0,
                         error: str | None = None, notes: Sequence[str] = (),
                         kernel: Kernel | None = None) -> StepDevicesPayload:
    """Everything the widget shows of a stepped run (pure). `landed_before`: transfers landed
    before the last step (those after it are new); `kernel` names its lines and semaphores as
    the Devices and Pipeline tabs do."""
    transfers = snap.transfers if snap is not None else ()
    semaphores = snap.semaphores if snap is not None else ()
    in_flight = snap.in_flight if snap is not None else ()
    shown = transfers[-MAX_STEP_EVENTS:]
    result = snap.result if snap is not None else None
    seqs = [t.seq for t in (*shown, *in_flight[:MAX_IN_FLIGHT])] + \
        [s.seq for s in semaphores[-MAX_STEP_EVENTS:]]
    return visible_payload(StepDevicesPayload(
        version=PAYLOAD_VERSION, kind="devices", kernel=kernel_name, index=index,
        devices=devices, started=snap is not None, position=snap.position if snap else 0,
        done=bool(snap and snap.done), last=last, rows=device_rows(snap, devices),
        in_flight=[_transfer(t, kernel) for t in in_flight[:MAX_IN_FLIGHT]],
        transfers=[_transfer(t, kernel) for t in shown], transfers_total=len(transfers),
        new_transfers=min(len(shown), max(0, len(transfers) - landed_before)),
        semaphores=[SemaphoreEntry(seq=s.seq, kind=s.kind, device=s.device,
                                   semaphore=s.semaphore,
                                   name=semaphore_name(kernel, s.semaphore) or f"#{s.semaphore}",
                                   amount=s.amount, source=source_name(s.source, kernel))
                    for s in semaphores[-MAX_STEP_EVENTS:]],
        semaphores_total=len(semaphores), events=max(seqs, default=-1) + 1,
        start=min(seqs, default=0),
        status=result.status if result is not None else None,
        findings=[f.to_json() for f in result.findings] if result is not None else [],
        error=error or run_error(result), notes=list(notes), interactive=interactive,
        revision=revision))


# --- the view --------------------------------------------------------------------------------


class DeviceStepView(InteractiveView):
    """A kernel inside shard_map stepped on `devices` simulated devices (the stepper is opened
    on the first step: its worker start takes a few seconds)."""

    name = "step"
    module = "step_devices.js"

    def __init__(self, ctx: KernelContext, devices: int, call: Call | None = None,
                 timeout: float | None = None):
        if ctx.kernel.device_mesh is None:
            raise PallasLabError(f"kernel {ctx.kernel.name!r} is not inside shard_map: step it "
                                 "without devices=")
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
            raise PallasLabError(f"devices must be a positive number of simulated devices, "
                                 f"got {devices!r}")
        self.ctx = ctx
        self.devices = devices
        self.timeout = timeout
        self._call = call
        self.stepper: DeviceStepper | None = None
        self.error: str | None = None
        self.last: str | None = None
        self._landed_before = 0
        self._revision = 0

    @property
    def started(self) -> bool:
        return self.stepper is not None

    def call_args(self) -> Call | None:
        """The call to step: the one given, the user's own (the magic's), else the traced
        function re-traced in the worker (it then builds its mesh on the N devices)."""
        if self._call is not None:
            return self._call
        cap = self.ctx.capture
        if cap is None:
            return None
        s = self.ctx.session
        if s is not None and s.call is not None:
            return s.call
        handle = cap.handle
        if handle is not None and getattr(handle, "fn", None) is not None:
            return handle.fn, tuple(handle.args), dict(handle.kwargs)
        return None

    def _open(self) -> DeviceStepper:
        from pallaslab.execute.stepping.device_stepper import DeviceStepper

        if self.stepper is None:
            call = self.call_args()
            if call is None:
                raise PallasLabError(f"kernel {self.ctx.kernel.name!r} has no call to re-run "
                                     "on several devices")
            fn, args, kwargs = call
            self.stepper = DeviceStepper(fn, args, kwargs, devices=self.devices,
                                         timeout=self.timeout)
        return self.stepper

    # --- actions (each updates the live widget) ---------------------------------------------

    def step(self, n: int = 1, *, device: int | None = None) -> DeviceStepView:
        """Every device (or `device` alone) runs `n` more programs."""
        if device is not None and not 0 <= int(device) < self.devices:
            self.error = f"there is no device {device}: the devices are 0..{self.devices - 1}"
            return self._refresh()
        who = "every device" if device is None else f"device {int(device)} alone"
        return self._do(lambda st: st.step(n, device=None if device is None else int(device)),
                        f"{who} ran {'one more program' if n == 1 else f'{n} more programs'}")

    def step_device(self, device: int, n: int = 1) -> DeviceStepView:
        return self.step(n, device=device)

    def run(self) -> DeviceStepView:
        """Step every device to the end of the run."""
        return self._do(lambda st: st.run(), "every device ran to the end")

    def reset(self) -> DeviceStepView:
        """Close the stepped run; the next step starts a new one from the first program."""
        self.close()
        self.error = self.last = None
        self._landed_before = 0
        return self._refresh()

    def close(self) -> None:
        st, self.stepper = self.stepper, None
        if st is not None:
            with contextlib.suppress(PallasLabError):  # its worker is gone: nothing to close
                st.close()

    def _do(self, action: Callable[[DeviceStepper], Any], what: str) -> DeviceStepView:
        self.error = None
        before = len(self.stepper.transfers) if self.stepper is not None else 0
        try:
            st = self._open()
            if st.done:
                self.error = "the run has ended: restart to step it again"
            else:
                action(st)
                self.last, self._landed_before = what, before
        except (PallasLabError, ValueError) as err:
            self.error = str(err)
        return self._refresh()

    def _refresh(self) -> DeviceStepView:
        self._revision += 1
        self._push()
        return self

    # --- payload and widget -------------------------------------------------------------------

    def _notes(self, live: bool) -> list[str]:
        notes = []
        if self.stepper is None:
            notes.append(
                f"Not stepped yet. Stepping runs the call on {self.devices} simulated CPU "
                "devices (TPU interpret mode in a worker process), every device paused at each "
                "program start: 'step all devices' lets each run one more program, 'step "
                "device d' one device alone (after a first step of all)." + (
                    "" if live else " Stepping needs a live kernel: run the notebook, or "
                    "wb.step().step() in Python."))
        elif len(self.stepper.grids) > 1:
            notes.append(f"The call launches {len(self.stepper.grids)} kernels: a device's "
                         "programs count those of every kernel.")
        if self.call_args() is None:
            notes.append("No call to re-run: open the workbench from the call (the magic, "
                         "pallaslab.inspect) or pass call=(fn, args, kwargs).")
        return notes

    def snapshot(self) -> DeviceStepSnapshot | None:
        return self.stepper.snapshot() if self.stepper is not None else None

    def _payload(self, *, live: bool) -> StepDevicesPayload:
        k = self.ctx.kernel
        return step_devices_payload(
            k.name, k.index, self.devices, self.snapshot(), landed_before=self._landed_before,
            last=self.last, interactive=live, revision=self._revision, error=self.error,
            notes=self._notes(live), kernel=k)

    def _on_selection(self, change: Mapping[str, Any]) -> None:
        if (sel := self._new_action(change)) is not None:
            handle_action(self, sel)

    # --- static forms -------------------------------------------------------------------------

    def tree(self) -> Section:
        """The stepped devices as one tree (`step_tree.device_step_tree`): what the text and
        HTML render."""
        p = self._payload(live=False)
        lanes = lanes_svg(cast(DevicesPayload, p)) if p["started"] and p["events"] else None
        return device_step_tree(p, lanes)

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        return to_html(self.tree())


def handle_action(view: DeviceStepView, sel: Mapping[str, Any]) -> DeviceStepView:
    """Apply one widget action to a device step view."""
    action = sel.get("action")
    if action == "step":
        return view.step()
    if action == "step_device" and sel.get("device") is not None:
        return view.step(device=int(sel["device"]))
    if action == "run":
        return view.run()
    if action == "reset":
        return view.reset()
    view.error = f"unknown step action {action!r}"
    return view._refresh()


def device_count(ctx: KernelContext) -> int | None:
    """The simulated devices the workbench was opened with (`devices=N`, `--devices N`)."""
    n = ctx.options.get("devices")
    if n is None or isinstance(n, bool):
        return None
    try:
        count = int(n)
    except (TypeError, ValueError):
        return None
    return count if count >= 1 else None


def device_steppable(ctx: KernelContext) -> bool:
    """A kernel inside shard_map in a workbench opened with devices=N."""
    return (ctx.capture is not None and ctx.kernel.device_mesh is not None
            and device_count(ctx) is not None)

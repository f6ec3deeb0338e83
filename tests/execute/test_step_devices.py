"""The Step tab of a kernel inside shard_map opened with devices=N (issue 13): the call stepped
on N simulated devices by the DeviceStepper, every device a program at a time (lockstep) or one
device alone; the payload's per-device programs, DMAs in flight and landed are the stepper's
own; a deadlock ends the run with its finding; text and HTML say what a stepped run shows."""

from __future__ import annotations

import json
import types

import pytest
from helpers import workbench
from kernels import CATALOG

import pallaslab
from pallaslab.views.base import module_source
from pallaslab.views.step import StepView
from pallaslab.views.step_devices import (
    MAX_STEP_EVENTS,
    DeviceStepView,
    handle_action,
    step_devices_payload,
)
from pallaslab.workbench import Workbench

DEVICES = 4
_CACHE: dict[str, types.SimpleNamespace] = {}  # one stepped run per kernel for every test


def snap(view: DeviceStepView) -> types.SimpleNamespace:
    st = view.stepper
    assert st is not None
    return types.SimpleNamespace(
        payload=view._payload(live=True), text=view.to_text(), html=view.to_html(),
        programs=st.programs, busy=st.busy, in_flight=st.in_flight, transfers=st.transfers,
        semaphores=st.semaphores, done=st.done, result=st.result)


def ring() -> types.SimpleNamespace:
    """ring_all_gather on 4 devices: before any step, device 0 asked to step too early, one
    lockstep step (through the widget's selection), device 0 alone, then to the end."""
    if "ring" not in _CACHE:
        wb = workbench("ring_all_gather", options={"devices": DEVICES})
        view = wb.step()
        assert isinstance(view, DeviceStepView)
        before = types.SimpleNamespace(payload=view._payload(live=False), text=view.to_text(),
                                       html=view.to_html())
        view.step(device=0)  # opens the run; a device's threads are known after a first step
        early = view._payload(live=True)
        view._on_selection({"new": {"action": "step", "nonce": 1}})
        lockstep = snap(view)
        view._on_selection({"new": {"action": "step", "nonce": 1}})  # the same request: ignored
        assert view.stepper is not None and view.stepper.position == 1
        view._on_selection({"new": {"action": "step_device", "device": 0, "nonce": 2}})
        one = snap(view)
        handle_action(view, {"action": "run"})
        end = snap(view)
        _CACHE["ring"] = types.SimpleNamespace(wb=wb, view=view, before=before, early=early,
                                               lockstep=lockstep, one=one, end=end)
    return _CACHE["ring"]


def deadlock() -> types.SimpleNamespace:
    if "deadlock" not in _CACHE:
        ring()  # (a new stepped run ends the one before it in the worker)
        view = workbench("missing_signal", options={"devices": DEVICES}).step()
        view.step()
        _CACHE["deadlock"] = types.SimpleNamespace(view=view, first=snap(view))
    return _CACHE["deadlock"]


def route(t):
    return (t.src_device, t.dst_device, t.nbytes, t.step, t.seq)


def entry_route(e):
    return (e["src"], e["dst"], e["bytes"], e["step"], e["seq"])


def test_the_step_tab_steps_a_shard_map_kernel_only_when_opened_with_devices():
    fn, args = CATALOG["ring_all_gather"].case()
    plain = pallaslab.inspect(fn, *args)
    assert "step" not in [t.name for t in plain.tabs(0)]  # as before: no Step tab
    assert "devices" in [t.name for t in plain.tabs(0)]
    wb = workbench("ring_all_gather", options={"devices": DEVICES})
    assert "step" in [t.name for t in wb.tabs(0)]
    view = plain.view("step", devices=DEVICES)  # or asked for explicitly
    assert isinstance(view, DeviceStepView) and view.devices == DEVICES
    assert view.module == "step_devices.js" and not view.started
    # a kernel outside shard_map keeps the program-by-program Step view
    fn, args = CATALOG["shifted_block_wrong"].case()
    other = Workbench(pallaslab.capture(fn, *args), options={"devices": DEVICES})
    assert isinstance(other.step(), StepView)
    with pytest.raises(pallaslab.PallasLabError, match="not inside shard_map"):
        other.view("step", devices=DEVICES)


def test_before_any_step_the_payload_is_cheap_and_says_what_stepping_shows():
    r = ring()
    p = r.before.payload
    assert not p["started"] and p["position"] == 0 and not p["interactive"]
    assert [row["status"] for row in p["rows"]] == ["not started"] * DEVICES
    assert not p["transfers"] and not p["in_flight"] and p["status"] is None
    assert "Stepping needs a live kernel" in p["notes"][0]
    assert r.before.text.startswith("Step kernel 0 body on 4 devices: not stepped yet")
    assert "Stepping needs a live kernel" in r.before.text
    assert "not stepped yet" in r.before.html and "<svg" not in r.before.html


def test_stepping_one_device_before_a_lockstep_step_says_why_not():
    p = ring().early
    assert p["started"] and p["position"] == 0
    assert "step every device once first" in p["error"]


def test_a_lockstep_step_shows_the_steppers_programs_and_transfers():
    s = ring().lockstep
    p = s.payload
    assert p["interactive"] and p["position"] == 1 and not p["done"]
    assert {r["device"]: r["programs"] for r in p["rows"]} == s.programs == \
        dict.fromkeys(range(DEVICES), 1)
    assert [r["total"] for r in p["rows"]] == [DEVICES - 1] * DEVICES  # the grid on 4 devices
    assert [r["status"] for r in p["rows"]] == ["waiting"] * DEVICES
    assert [entry_route(e) for e in p["in_flight"]] == [route(t) for t in s.in_flight] == []
    assert [entry_route(e) for e in p["transfers"]] == [route(t) for t in s.transfers]
    assert p["transfers_total"] == len(s.transfers) == 8 and p["new_transfers"] == 8
    remote = sorted((e["src"], e["dst"]) for e in p["transfers"] if e["remote"])
    assert remote == [(d, (d + 1) % DEVICES) for d in range(DEVICES)]
    assert [(r["sent"], r["received"]) for r in p["rows"]] == [(1, 1)] * DEVICES
    assert p["semaphores_total"] == len(s.semaphores)
    assert 0 <= p["start"] < p["events"] == 1 + max(
        [t.seq for t in s.transfers] + [e.seq for e in s.semaphores])
    assert sum(r["signals"] + r["waits"] for r in p["rows"]) == len(s.semaphores)
    assert p["last"] == "every device ran one more program" and p["error"] is None
    assert "waiting: at the start of program 2/3" in s.text  # device 0's row
    assert "Landed: 8 DMAs" in s.text and "Landed: 8 DMAs" in s.html
    rows = [ln.split() for ln in s.text.split("Landed: 8 DMAs")[1].splitlines()]
    assert ["0", "device", "0", "device", "1", "4,096"] in [r[:6] for r in rows]  # step 0
    assert 'class="pl-devices-lanes"' in s.html and "waiting: at the start of program 2/3" \
        in s.html


def test_one_device_alone_blocks_with_its_dma_in_flight():
    s = ring().one
    p = s.payload
    assert {r["device"]: r["programs"] for r in p["rows"]} == s.programs == \
        {0: 2, 1: 1, 2: 1, 3: 1}
    assert s.busy == [0]
    assert [r["status"] for r in p["rows"]] == ["blocked", "waiting", "waiting", "waiting"]
    assert [entry_route(e) for e in p["in_flight"]] == [route(t) for t in s.in_flight]
    assert [(e["src"], e["dst"], e["step"]) for e in p["in_flight"]] == [(0, 1, 1)]
    assert [r["in_flight"] for r in p["rows"]] == [1, 0, 0, 0]
    assert p["new_transfers"] == 0 and p["last"] == "device 0 alone ran one more program"
    text = s.text.split("In flight (sent, not landed)")[1]
    assert text.splitlines()[2].split()[:6] == ["1", "device", "0", "device", "1", "4,096"]
    assert "In flight (sent, not landed)" in s.html


def test_the_end_of_the_run_gives_its_status():
    s = ring().end
    p = s.payload
    assert s.done and p["done"] and p["status"] == "ran" and not p["findings"]
    assert [r["status"] for r in p["rows"]] == ["finished"] * DEVICES
    assert [r["programs"] for r in p["rows"]] == [DEVICES - 1] * DEVICES
    assert p["transfers_total"] == 16 and [entry_route(e) for e in p["transfers"]] == \
        [route(t) for t in s.transfers]
    assert "  result: ran" in s.text
    # the ended run steps no further; restarting closes it and starts from nothing
    view = ring().view
    view.step()
    assert "the run has ended" in view._payload(live=True)["error"]


def test_a_missing_signal_ends_with_a_deadlock_finding():
    s = deadlock().first
    p = s.payload
    assert p["done"] and p["status"] == "failed"
    assert [f["code"] for f in p["findings"]] == ["deadlock"]
    assert p["error"] is None  # the finding says it
    assert [r["status"] for r in p["rows"]] == ["blocked"] * DEVICES
    assert all("waits for a signal no one sends" in r["detail"] for r in p["rows"])
    assert "error deadlock: every device is blocked" in s.text
    assert "<code>deadlock</code>: every device is blocked" in s.html


def test_the_payload_is_small_and_capped():
    end = ring().end
    assert len(json.dumps(end.payload)) < 20_000
    # many events: only the latest are sent, with the totals
    many = tuple(end.transfers) * 40
    snapshot = types.SimpleNamespace(
        devices=DEVICES, position=3, done=False, programs=end.programs, busy=(),
        transfers=many, in_flight=(), semaphores=tuple(end.semaphores) * 40, result=None,
        grids=((3,),))
    big = step_devices_payload("k", 0, DEVICES, snapshot, landed_before=len(many) - 5)
    assert len(big["transfers"]) == MAX_STEP_EVENTS and big["transfers_total"] == len(many)
    assert big["transfers"][-1]["seq"] == many[-1].seq  # the latest
    assert len(big["semaphores"]) == MAX_STEP_EVENTS and big["new_transfers"] == 5


def test_restart_closes_the_run_through_the_widget():
    pytest.importorskip("anywidget")
    view = ring().view
    widget = view.widget  # the live widget: its selection reaches the view
    revision = widget.payload["revision"]
    widget.selection = {"action": "reset", "nonce": "restart-1"}
    p = widget.payload
    assert p["revision"] == revision + 1 and p["interactive"]
    assert not view.started and not p["started"] and p["error"] is None
    source = module_source("step_devices.js")  # what the widget loads: prelude inlined
    assert "prelude.js (inlined)" in source and source.count("export default") == 1


def test_the_magic_passes_devices_to_the_views():
    from pallaslab import magic

    opts = magic._options(magic.parse_argstring(
        magic.PallasMagics.pallas, "--compare tpu-interpret,interpret --devices 4"))
    assert opts["devices"] == 4 and opts["extra"]["devices"] == 4
    plain = magic._options(magic.parse_argstring(magic.PallasMagics.pallas,
                                                 "--compare tpu-interpret,interpret"))
    assert "devices" not in plain["extra"]


def test_the_magics_devices_open_the_step_tab_on_that_many_devices(shown):
    pytest.importorskip("IPython")
    from ipython_shell import ipython_shell, run

    for shell in ipython_shell("from kernels import CATALOG\n"
                               "fn, (x,) = CATALOG['right_permute'].case()\n"
                               "ref = CATALOG['right_permute'].reference\n"):
        result, _ = run(shell, "%%pallas --compare tpu-interpret,reference=ref --devices 4\n"
                               "fn(x)\n")
        assert result.success, result.error_in_exec
        (wb,) = shown
        assert wb.options["devices"] == DEVICES and "step" in [t.name for t in wb.tabs(0)]
        view = wb.view("step")
        assert isinstance(view, DeviceStepView) and view.devices == DEVICES
        # the user's own call, as the magic captured it (only the leaves tracing computed)
        assert getattr(view.call_args()[0], "fn", None) is shell.user_ns["fn"]
        view.step()
        p = view._payload(live=True)
        assert p["done"] and p["status"] == "ran"
        assert sorted((e["src"], e["dst"]) for e in p["transfers"] if e["remote"]) == [
            (d, (d + 1) % DEVICES) for d in range(DEVICES)]

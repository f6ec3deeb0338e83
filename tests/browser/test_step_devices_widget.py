"""The Step tab on N devices (step_devices.js) in real Chromium, against an in-page fake model:
the buttons send the DeviceStepView's requests through `selection`, and each payload Python
answers with (made here from a real stepped run) is drawn device by device."""

from __future__ import annotations

import pytest
from harness import mount
from kernels import CATALOG

import pallaslab
from pallaslab.workbench import Workbench

DEVICES = 4


def _view(name):
    fn, args = CATALOG[name].case()
    return Workbench(pallaslab.capture(fn, *args), options={"devices": DEVICES}).step()


@pytest.fixture(scope="module")
def payloads():
    """Live payloads of ring_all_gather before, after a lockstep step and after device 0
    alone; then missing_signal after its first step (the deadlock)."""
    view = _view("ring_all_gather")
    out = {"before": view._payload(live=True)}
    view.step()
    out["lockstep"] = view._payload(live=True)
    view.step(device=0)
    out["one"] = view._payload(live=True)
    view.run()
    dead = _view("missing_signal")
    dead.step()
    out["deadlock"] = dead._payload(live=True)
    return {k: dict(v) for k, v in out.items()}


def answer(page, payload):
    """What the DeviceStepView does after a request: a new payload."""
    page.evaluate("p => window.model.set('payload', p)", payload)


def saved(page):
    return page.evaluate("window.model.saved")


def statuses(page):
    rows = page.locator("table.pl-sd-devices tr[data-device]")
    return [(row.get_attribute("data-status"), row.locator("td").nth(1).inner_text())
            for row in rows.all()]


def test_stepping_all_devices_then_one_draws_each_devices_state(page, payloads, results_dir):
    mount(page, "step_devices.js", payloads["before"])
    assert statuses(page) == [("not started", "0")] * DEVICES
    assert "not stepped yet" in page.locator(".pl-sd-where").inner_text()
    # one device cannot be stepped before every device stepped once
    assert page.locator("button.pl-sd-step-device").is_disabled()
    page.locator("button.pl-sd-step").click()
    assert saved(page)[-1]["action"] == "step"
    assert page.locator(".pl-step-devices").get_attribute("data-busy") == "true"
    assert page.locator("button.pl-sd-step").is_disabled()  # until Python answers

    answer(page, payloads["lockstep"])
    assert statuses(page) == [("waiting", "1/3")] * DEVICES
    assert page.locator(".pl-sd-where").inner_text().endswith("lockstep step 1 · 8 DMAs landed · "
                                                              "0 in flight")
    landed = page.locator("table.pl-sd-transfers tr.pl-sd-new")
    assert landed.count() == 8  # all new in this step
    ends = [(row.get_attribute("data-src"), row.get_attribute("data-dst")) for row in landed.all()]
    remote = sorted((src, dst) for src, dst in ends if src != dst)
    assert remote == [(str(d), str((d + 1) % DEVICES)) for d in range(DEVICES)]
    assert page.locator("svg.pl-sd-lanes line.pl-sd-dma").count() == 8
    assert page.locator("table.pl-sd-inflight").count() == 0

    page.locator("select.pl-sd-device").select_option("2")
    page.locator("button.pl-sd-step-device").click()
    assert saved(page)[-1] == {**saved(page)[-1], "action": "step_device", "device": 2}
    assert page.locator("select.pl-sd-device").is_disabled()  # until Python answers
    answer(page, payloads["lockstep"])  # (the answer to device 2, not needed here)
    assert page.locator("select.pl-sd-device").input_value() == "2"  # the choice is kept
    page.locator("select.pl-sd-device").select_option("0")
    page.locator("button.pl-sd-step-device").click()
    assert saved(page)[-1]["action"] == "step_device" and saved(page)[-1]["device"] == 0

    answer(page, payloads["one"])
    assert statuses(page) == [("blocked", "2/3"), ("waiting", "1/3"), ("waiting", "1/3"),
                              ("waiting", "1/3")]
    flight = page.locator("table.pl-sd-inflight tr[data-src]")
    assert flight.count() == 1
    assert [c.inner_text() for c in flight.first.locator("td").all()][:4] == \
        ["1", "device 0", "device 1", "4,096"]
    assert page.locator("svg.pl-sd-lanes line.pl-sd-inflight-arrow").count() == 1
    assert page.locator(".pl-sd-last").inner_text() == "Last step: device 0 alone ran one more " \
        "program."
    page.screenshot(path=str(results_dir / "step-devices-light.png"))


def test_a_deadlock_ends_with_its_finding_and_no_more_steps(page, payloads, results_dir):
    mount(page, "step_devices.js", payloads["deadlock"], dark=True)
    assert page.locator(".pl-sd-result").get_attribute("data-status") == "failed"
    finding = page.locator("ul.pl-findings li.pl-finding")
    assert finding.count() == 1 and "deadlock" in finding.first.inner_text()
    assert "every device is blocked" in finding.first.inner_text()
    assert [s for s, _ in statuses(page)] == ["blocked"] * DEVICES
    for button in ("pl-sd-step", "pl-sd-step-device", "pl-sd-run"):
        assert page.locator(f"button.{button}").is_disabled()
    assert not page.locator("button.pl-sd-reset").is_disabled()
    page.locator("button.pl-sd-reset").click()
    assert saved(page)[-1]["action"] == "reset"
    page.screenshot(path=str(results_dir / "step-devices-deadlock-dark.png"))


def test_a_static_payload_offers_no_buttons_and_text_stays_text(page, payloads):
    static = {**payloads["lockstep"], "interactive": False,
              "kernel": "<img src=x onerror=alert(1)>"}
    mount(page, "step_devices.js", static)
    assert all(page.locator(f"button.{b}").is_disabled()
               for b in ("pl-sd-step", "pl-sd-step-device", "pl-sd-run", "pl-sd-reset"))
    assert "Static snapshot" in page.locator(".pl-step-devices").inner_text()
    assert page.locator(".pl-title code").inner_text() == "<img src=x onerror=alert(1)>"
    assert page.locator(".pl-step-devices img").count() == 0

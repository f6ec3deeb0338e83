"""The Devices table in ring-step order, its DMAs counted as their bytes are (issue 39 item 5)."""

from kernels import CATALOG

import pallaslab

DEVICES = 4


def test_the_devices_table_is_in_step_order_and_counts_local_copies_apart():
    fn, args = CATALOG["ring_all_gather"].case()
    wb = pallaslab.Workbench(pallaslab.capture(fn, *args))
    view = wb.view("devices", result=pallaslab.run(fn, *args, devices=DEVICES))
    p = view.payload()
    steps = [t["step"] for t in p["transfers"]]
    assert steps == sorted(steps)
    remote = [t for t in p["transfers"] if t["remote"]]
    local = [t for t in p["transfers"] if not t["remote"]]
    assert (len(remote), len(local)) == (12, 4)  # 3 ring steps x 4 devices; each own shard
    block = 8 * 128 * 4
    assert p["remote_bytes"] == 12 * block == 49_152
    assert p["summary"] == "16 DMAs: 12 between devices (49,152 B), 4 local copies (16,384 B)"
    text = view.to_text()
    assert "4 devices, 16 DMAs: 12 between devices (49,152 B), 4 local copies (16,384 B) " \
           "(in ring-step order)" in text
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 16 and rows[0][:2] == ["0", "device"]  # a table row per DMA
    assert [int(r[0]) for r in rows] == steps  # ring-step order
    assert "<td>device 0 (local)</td>" in view.to_html()

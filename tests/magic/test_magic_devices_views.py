"""`%%pallas --devices N` on a kernel inside shard_map (issue 26, item 3): every tab of the
workbench it shows describes the run its Step and Devices tabs make, the per-device kernel as
traced on N simulated devices, not this process's one-device trace."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from ipython_shell import ipython_shell, run

SETUP = """
import jax
from kernels_multi import ring_all_gather
gather, (x,) = ring_all_gather()[:2]
"""


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


def test_the_magic_on_four_devices_shows_each_devices_kernel_in_every_tab(shell, shown):
    assert shell.user_ns["jax"].device_count() == 1  # one program over (32, 128) here
    result, _ = run(shell, "%%pallas --devices 4\ngather(x)")
    assert result.success, result.error_in_exec
    (wb,) = shown
    overview = wb.overview().payload()
    shapes = {op["origin"]: op["shape"] for op in overview["kernel"]["operands"]}
    assert overview["kernel"]["grid"] == [3]  # three ring steps on 4 devices
    assert shapes["args[0]"] == [8, 128] and shapes["outputs"] == [4, 8, 128]
    assert "traced on 4 simulated devices" in overview["devices_note"]
    assert wb.grid().payload()["grid"] == [3]
    row = next(ln.split() for ln in wb.view("memory").to_text().splitlines() if "scratch[2]" in ln)
    assert row[row.index("semaphore"):][:4] == ["semaphore", "3", "semaphore", "1"]  # 1 buffer
    assert "3 steps" in wb.view("pipeline").to_text()
    devices = wb.view("devices").payload()
    assert devices["devices"] == 4 and len(devices["transfers"]) == 16  # the run's DMAs
    html = wb.to_html()
    assert "grid 3" in html and "grid 1 " not in html

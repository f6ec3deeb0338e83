"""A notebook's kernel that stepped a multi-device kernel ("step all devices" in the Step tab:
a `DeviceStepper` in the N-device worker) takes that worker with it when it is shut down or
killed (issue 26, item 6): no worker is left running under init."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# As the Step tab's "step all devices" does: open the stepper on 4 devices, step them once, then
# idle (a kernel waiting for the next cell) until killed.
STEPPING_PARENT = textwrap.dedent('''
    import time
    import kernels_multi
    from pallaslab.execute.stepping.device_stepper import DeviceStepper

    fn, args = kernels_multi.ring_all_gather()[:2]
    stepper = DeviceStepper(fn, args, devices=4)
    stepper.step()
    print("stepped", stepper.position, flush=True)
    time.sleep(600)
''')


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie whose new parent has not reaped it yet has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_kernel_that_stepped_devices_takes_its_worker_with_it(tmp_path, signum):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TMPDIR": str(tmpdir)}
    proc = subprocess.Popen([sys.executable, "-c", STEPPING_PARENT], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until stepped (or the parent failed)
        assert line.startswith("stepped 1"), (line, proc.stderr.read() if proc.stderr else "")
        workers = [p for p in _children(proc.pid)
                   if b"pallaslab.execute.worker.main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert workers, "the stepper's worker was not found among the parent's children"
        proc.send_signal(signum)  # SIGTERM: Python's default, no atexit; SIGKILL: no chance
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 20  # the worker polls its parent every 0.2 s
        while any(_running(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [w for w in workers if _running(w)]
        assert not left, f"worker(s) {left} outlived their parent ({signal.Signals(signum).name})"
        # the parent's temporary folder goes with the worker
        deadline = time.monotonic() + 10
        while list(tmpdir.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(tmpdir.iterdir()) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:  # a failed test leaves nothing running
            if _running(w):
                os.kill(w, signal.SIGKILL)

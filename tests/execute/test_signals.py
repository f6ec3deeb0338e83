"""Signals end the executor worker with its parent: SIGTERM and SIGHUP to the CLI, Ctrl-C in
the CLI, and a parent that dies outright (a Jupyter kernel restarted or shut down)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

SPIN_CASE = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl


    def spin_kernel(x_ref, o_ref):  # its one program never leaves the loop
        def body(c):
            return c * 0.5 + x_ref[0, 0]

        n = jax.lax.while_loop(lambda c: c > -1.0, body, jnp.float32(1e31))
        o_ref[...] = x_ref[...] + n * 0.0


    def spin(x):
        return pl.pallas_call(spin_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


    def case():
        return spin, (jnp.ones((8, 128), jnp.float32),)
''')

# A parent that is not the CLI: it runs the spinning kernel through the Python API, as a
# notebook's kernel would, until it is killed.
API_PARENT = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[1])
    import pallaslab
    import spin_case
    fn, args = spin_case.case()
    pallaslab.run(fn, *args, executor="interpret", timeout=600)
''')


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    """Exited (a zombie whose new parent has not reaped it yet counts as exited)."""
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z"
    except OSError:
        return True


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def spinning(tmpdir: Path) -> bool:
    """The worker has started the kernel's program (its status slot counts it)."""
    return any(np.fromfile(path, np.int64)[0] > 0
               for path in tmpdir.glob("pallaslab-*/workers/status-*.bin"))


def start(tmp_path: Path, argv: list[str]) -> tuple[subprocess.Popen, Path]:
    (tmp_path / "spin_case.py").write_text(SPIN_CASE)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TMPDIR": str(tmpdir)}
    # A background shell may have left SIGINT ignored: the child gets its KeyboardInterrupt.
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, tmpdir


def start_cli(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    return start(tmp_path, [sys.executable, "-m", "pallaslab", "compare",
                            f"{tmp_path}/spin_case.py:case", "--executors",
                            "interpret,tpu-interpret", "--timeout", "600"])


def kill_if_left(pid: int) -> None:
    """A failed test must not leave a spinning worker behind."""
    if not gone(pid):
        os.kill(pid, signal.SIGKILL)


def worker_of(proc: subprocess.Popen, tmpdir: Path) -> int:
    try:
        wait_for(lambda: spinning(tmpdir) or proc.poll() is not None, 240, "the spin to start")
    except AssertionError:
        proc.kill()
        raise
    assert proc.poll() is None, proc.communicate()
    (worker,) = children(proc.pid)
    return worker


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_to_the_cli_end_its_worker_and_remove_its_temporary_folder(
        tmp_path, signum):
    proc, tmpdir = start_cli(tmp_path)
    worker = worker_of(proc, tmpdir)
    try:
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signum, err
        assert f"terminated by {signal.Signals(signum).name}" in err
        wait_for(lambda: gone(worker), 10, f"worker {worker} to end")
    finally:
        kill_if_left(worker)
    assert list(tmpdir.iterdir()) == []


def test_ctrl_c_in_the_cli_names_the_executor_and_program_it_stopped(tmp_path):
    proc, tmpdir = start_cli(tmp_path)
    worker = worker_of(proc, tmpdir)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        flat = " ".join(err.split())  # the console wraps long lines
        assert "interrupted: interpret run interrupted after" in flat, err
        assert "while running program () of spin_kernel" in flat, err
        wait_for(lambda: gone(worker), 10, f"worker {worker} to end")
    finally:
        kill_if_left(worker)
    assert list(tmpdir.iterdir()) == []


def test_a_parent_that_dies_outright_takes_its_worker_and_temporary_folder_with_it(tmp_path):
    # A Jupyter kernel restarted or shut down mid-run is killed without a chance to clean up.
    proc, tmpdir = start(tmp_path, [sys.executable, "-c", API_PARENT, str(tmp_path)])
    worker = worker_of(proc, tmpdir)
    try:
        proc.kill()
        proc.communicate(timeout=60)
        wait_for(lambda: gone(worker), 10, f"worker {worker} to follow its parent")
    finally:
        kill_if_left(worker)
    wait_for(lambda: not list(tmpdir.iterdir()), 10, "the temporary folder to go")

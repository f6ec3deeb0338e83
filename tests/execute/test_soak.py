"""A soak test: many runs in one process (as a notebook's kernel makes them) alternating
compare, step, a run stopped by its time limit and a killed worker, leave no process, file
or temporary folder behind, and memory flat.

The runs happen in a child process with a `TMPDIR` of its own, so that what other pallaslab
processes on the machine create cannot be mistaken for a leak, and whatever outlives it can
be found (any process whose environment names that `TMPDIR`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("PALLASLAB_SOAK_RUNS", "200"))
# Every CYCLE runs: one run stopped by its time limit and one after a killed worker (each
# costs a fresh worker, 2 to 8 s on a 2-core machine); the rest alternate compare (interpret
# against a reference) and step on the warm worker, about 0.1 to 0.5 s each.
CYCLE = 50
RSS_GROWTH_LIMIT_MB = 200

SOAK = textwrap.dedent('''
    import json, os, signal, sys, tempfile, time
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    import pallaslab
    from pallaslab.execute.worker import isolation
    from pallaslab.util.tempdir import session_tmpdir

    RUNS, CYCLE = int(sys.argv[1]), int(sys.argv[2])


    def add_one_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0


    def add_one(x):
        return pl.pallas_call(add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)


    def spin_kernel(x_ref, o_ref):  # never leaves its loop
        n = jax.lax.while_loop(lambda c: c > -1.0, lambda c: c * 0.5 + x_ref[0, 0],
                               jnp.float32(1e31))
        o_ref[...] = x_ref[...] + n * 0.0


    def spin(x):
        return pl.pallas_call(spin_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


    def children():
        me, found = os.getpid(), []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == me and fields[0] != "Z":
                    found.append(int(entry.name))
        return sorted(found)


    def rss_mb():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


    def state():
        return {"children": len(children()), "rss_mb": round(rss_mb(), 1),
                "fds": len(os.listdir("/proc/self/fd")),
                "files": sorted(str(p.relative_to(session_tmpdir()))
                                for p in session_tmpdir().rglob("*") if p.is_file()),
                "tmpdirs": sorted(p.name for p in Path(tempfile.gettempdir()).iterdir())}


    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    want = x + 1.0
    counts = {"compare": 0, "step": 0, "timed-out": 0, "killed": 0}


    def check(ok, what):
        if not ok:
            raise AssertionError(what)


    def once(i):
        phase = i % CYCLE
        if phase == CYCLE // 2:
            result = pallaslab.run(spin, x, executor="interpret", timeout=1)
            check(result.status == "timed-out", (result.status, result.error))
            counts["timed-out"] += 1
        elif phase == CYCLE - 1:
            worker = isolation._WORKERS._worker
            os.kill(worker.proc.pid, signal.SIGKILL)  # between runs: the OOM killer, say
            while worker.alive():
                time.sleep(0.01)
            result = pallaslab.run(add_one, x, executor="interpret")
            check(result.status == "ran" and (result.outputs[0] == want).all(),
                  (result.status, result.error))
            counts["killed"] += 1
        elif i % 2:
            st = pallaslab.step(add_one, x)
            st.step(st.programs)
            check((st.outputs()[0] == want).all(), "step")
            counts["step"] += 1
        else:
            c = pallaslab.compare(add_one, x, executors="interpret,reference",
                                  reference=lambda x: x + 1.0)
            check(c.complete and c.passed, c)
            counts["compare"] += 1


    once(0)  # the worker warm, JAX compiled: what stays for the session
    start, began = state(), time.monotonic()
    for i in range(1, RUNS + 1):
        once(i)
    once(0)  # ends on a warm worker, as it started
    end = state()
    isolation.shutdown_worker()
    print(json.dumps({"start": start, "end": end, "counts": counts,
                      "seconds": round(time.monotonic() - began, 1),
                      "after_shutdown": len(children())}))
''')


def processes_with_tmpdir(tmpdir: Path) -> list[int]:
    """Processes started under this `TMPDIR` (only ours can have it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if f"TMPDIR={tmpdir}".encode() in environ and state != "Z":
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_soak_leaves_nothing_behind_and_memory_flat(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TMPDIR": str(tmpdir)}
    proc = subprocess.run([sys.executable, "-c", SOAK, str(RUNS), str(CYCLE)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    start, end = figures["start"], figures["end"]
    print(f"\nsoak: {RUNS} runs {figures['counts']} in {figures['seconds']} s; resident "
          f"memory {start['rss_mb']} MB at the start, {end['rss_mb']} MB at the end; "
          f"open files {start['fds']} -> {end['fds']}")
    assert figures["counts"]["timed-out"] == RUNS // CYCLE
    assert figures["counts"]["killed"] == RUNS // CYCLE
    # One warm worker at either end, its two files (log, status) and one session folder.
    assert start["children"] == end["children"] == 1
    assert figures["after_shutdown"] == 0
    assert len(end["files"]) == len(start["files"]) == 2, end["files"]
    assert start["tmpdirs"] == end["tmpdirs"] and len(end["tmpdirs"]) == 1
    assert end["fds"] <= start["fds"]
    assert end["rss_mb"] - start["rss_mb"] < RSS_GROWTH_LIMIT_MB
    # And once it has exited: no process and no temporary folder.
    assert processes_with_tmpdir(tmpdir) == []
    assert list(tmpdir.iterdir()) == []

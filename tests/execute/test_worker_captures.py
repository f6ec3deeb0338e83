"""The executor worker keeps the calls it captured (issue 28, the warm loop): a repeated run,
or a second executor of one comparison, reuses the capture; a changed kernel body, block shape,
closed-over constant or argument value is another call and misses, giving the new result. The
arguments travel in a frame of their own, and JAX arrays (immutable) only once to a worker that
keeps them. And the `pallaslab` command starts its worker
before importing JAX, which the executors then adopt."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from jax.experimental import pallas as pl
from kernels import rand

import pallaslab
from pallaslab.execute.worker import isolation
from pallaslab.execute.worker import main as _worker
from pallaslab.execute.worker.compile_cache import capture_cache_stats
from pallaslab.execute.worker.worker_request import encode_frames

ROWS = 256


def _scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 3.0


def _shift_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 3.0


def blocked(kernel, block=64):
    def fn(x):
        spec = pl.BlockSpec((block, 128), lambda i: (i, 0))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0] // block,), in_specs=[spec], out_specs=spec)(x)
    return fn


def plus(constant):
    def fn(x):
        return blocked(_scale_kernel)(x) + constant
    return fn


def _run(fn, x):
    result = pallaslab.run(fn, x, executor="vectorized")
    assert result.outputs is not None, result.error or result.unavailable
    return result.outputs[0]


def _delta(before, after):
    return after["hits"] - before["hits"], after["misses"] - before["misses"]


@pytest.fixture(scope="module")
def x():
    return rand((ROWS, 128), seed=21)


def test_a_repeated_run_reuses_the_capture_and_gives_the_same_outputs(x):
    fn = plus(np.full((ROWS, 128), 0.25, np.float32))
    before = capture_cache_stats()
    first = _run(fn, x)
    again = _run(fn, x)
    assert _delta(before, capture_cache_stats()) == (1, 1)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(again, np.asarray(x) * 3 + 0.25, rtol=1e-6, atol=1e-6)


def test_a_changed_kernel_block_constant_or_value_misses_with_the_new_result(x):
    data = np.asarray(x)
    _run(blocked(_scale_kernel), x)
    changes = [
        (blocked(_shift_kernel), x, data + 3.0),                         # the kernel body
        (blocked(_scale_kernel, block=128), x, data * 3.0),              # the block shape
        (plus(np.full((ROWS, 128), 1.5, np.float32)), x, data * 3 + 1.5),  # a constant
        (blocked(_scale_kernel), x + 1.0, (data + 1.0) * 3.0),           # an argument's value
    ]
    for fn, arg, want in changes:
        before = capture_cache_stats()
        got = _run(fn, arg)
        assert _delta(before, capture_cache_stats()) == (0, 1)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_two_executors_of_a_comparison_share_one_capture(x):
    fn = plus(np.full((ROWS, 128), -2.0, np.float32))
    before = capture_cache_stats()
    c = pallaslab.compare(fn, x, executors="interpret,vectorized")
    assert c.complete and c.allclose
    assert _delta(before, capture_cache_stats()) == (1, 1)
    assert capture_cache_stats()["size"] <= capture_cache_stats()["maxsize"]


def test_the_arguments_travel_in_a_frame_of_their_own_left_behind_under_their_token(x):
    call = encode_frames({"executor": "vectorized", "fn": plus(0.0), "args": (x,),
                          "kwargs": {}})
    big = np.asarray(x).nbytes
    header, executor, work, args = call.frames()
    assert len(args) > big and max(len(header), len(executor), len(work)) < big
    assert max(map(len, call.frames(send_args=False))) < big
    assert call.args_token is not None  # a JAX array cannot change in place
    assert encode_frames({"fn": plus(0.0), "args": (x,), "kwargs": {}}).args_token == \
        call.args_token
    assert encode_frames({"fn": plus(0.0), "args": (np.asarray(x),), "kwargs": {}}
                         ).args_token is None  # a NumPy array can


@pytest.fixture
def sent(monkeypatch):
    """The largest frame of each exchange with the worker."""
    sizes: list[int] = []
    exchange = isolation._Workers._exchange

    def spy(self, worker, frames, *rest):
        sizes.append(max(map(len, frames)))
        return exchange(self, worker, frames, *rest)

    monkeypatch.setattr(isolation._Workers, "_exchange", spy)
    return sizes


def test_unchanged_jax_arrays_travel_once_and_numpy_arrays_every_time(x, sent):
    fn, y = plus(0.5), x + 1.0  # arrays no earlier test sent
    big = np.asarray(y).nbytes
    first, again = _run(fn, y), _run(fn, y)
    np.testing.assert_array_equal(again, first)
    assert sent[0] > big > sent[1]
    sent.clear()
    data = np.asarray(y)
    np.testing.assert_array_equal(_run(fn, data), _run(fn, data))
    assert min(sent) > big


def test_an_edited_kernel_on_the_same_jax_arrays_sends_only_their_token(x, sent):
    y = x + 3.0
    _run(plus(1.0), y)
    sent.clear()
    np.testing.assert_allclose(_run(blocked(_shift_kernel), y), np.asarray(y) + 3.0)
    assert len(sent) == 1 and sent[0] < np.asarray(y).nbytes  # no {"resend-args"} either


def test_arguments_the_worker_no_longer_keeps_are_sent_again(x, sent):
    fn, y = plus(-0.5), x + 2.0
    first = _run(fn, y)
    for i in range(_worker.MAX_PREPARED + 1):  # other calls, on other arrays, push it out
        _run(plus(float(i)), x + float(i))
    sent.clear()
    np.testing.assert_array_equal(_run(fn, y), first)
    big = np.asarray(y).nbytes
    assert sent[0] < big < sent[1]  # the token alone, then {"resend-args"}: all of it


def test_the_command_starts_its_worker_early_and_the_executors_adopt_it():
    script = textwrap.dedent("""
        import sys
        from pallaslab.cli._shared import start_worker_early
        from pallaslab.util import worker_process
        start_worker_early(["compare", "case.py:f"])
        assert "jax" not in sys.modules  # started before JAX is imported
        early = worker_process._EARLY[0].proc.pid
        import jax
        import numpy as np
        from jax.experimental import pallas as pl
        import pallaslab
        from pallaslab.execute.worker import isolation

        def add_one(x_ref, o_ref):
            o_ref[...] = x_ref[...] + 1.0

        def fn(x):
            return pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

        r = pallaslab.run(fn, np.ones(4, np.float32), executor="interpret")
        print(isolation._WORKERS._worker.proc.pid == early, r.outputs[0].tolist())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "True [2.0, 2.0, 2.0, 2.0]"

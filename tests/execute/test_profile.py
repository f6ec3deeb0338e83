"""Profiler timelines on the CPU: the kernel runs interpreted under jax.profiler.trace."""

import numpy as np
from kernels import CATALOG

import pallaslab
from pallaslab.analysis.pipeline import pipeline
from pallaslab.execute.profile import (
    KERNEL,
    OP,
    STEP,
    _whole_grid_or_no_steps,
    profile,
    read_trace,
)


def test_cpu_profile_contains_the_kernel_events(tmp_path):
    fn, args = CATALOG["matmul_f32"].case()  # grid (4, 3, 2): 24 programs
    p = profile(fn, *args, trace_dir=str(tmp_path))
    assert p.kernel == "matmul_kernel" and p.device == "cpu (interpret)"
    ev = p.events
    (k,) = np.flatnonzero(ev.kind == KERNEL)
    assert p.steps == 24
    steps = ev.kind == STEP
    assert sorted(ev.program[steps].tolist()) == list(range(24))
    # Every step lies inside the kernel and they run in order, one after another.
    assert np.all(ev.start[steps] >= ev.start[k]) and np.all(ev.end[steps] <= ev.end[k])
    order = np.argsort(ev.program[steps])
    assert np.all(np.diff(ev.start[steps][order]) > 0)
    ops = ev.kind == OP
    program = ev.program[ops]
    assert (program >= 0).any() and set(program.tolist()) <= set(range(-1, 24))
    # -1: an op of the loop's set-up, before the first program (seen on a loaded machine)
    assert np.all(ev.start[ops][program == -1] < ev.start[steps].min())
    assert p.total_time > 0 and p.step_durations().shape == (24,)
    # The same file read again gives the same events; the model uses the same columns.
    again = read_trace(p.trace_file)
    assert len(again) == len(ev)
    model = pipeline(pallaslab.capture(fn, *args)[0], "v5e").events
    assert set(model.columns()) == set(ev.columns())
    # Steps that are not the whole grid (iterations lost to other threads) are not shown.
    assert _whole_grid_or_no_steps(ev, 24) is ev
    partial = _whole_grid_or_no_steps(ev, 30)
    assert not (partial.kind == STEP).any() and (partial.kind == KERNEL).sum() == 1
    assert (partial.kind == OP).sum() == ops.sum()

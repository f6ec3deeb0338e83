"""The stepper never hangs: each program runs in a worker process with a time limit and
Ctrl-C; a program that spins inside a compiled loop is stopped and the stepper stays usable."""

import os
import signal
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import failing_on_hang
from jax import lax
from jax.experimental import pallas as pl
from kernels import CATALOG

import pallaslab
from pallaslab.execute import run
from pallaslab.execute.stepping.step_worker import StepTimeLimitError
from pallaslab.execute.stepping.stepper import ProgramOutsideGridError
from pallaslab.execute.worker.isolation import TimeoutValueError

GUARD = 240  # seconds: a hang fails the run (with every thread's traceback) instead of blocking


@pytest.fixture(autouse=True)
def hang_guard():
    with failing_on_hang(GUARD):
        yield


def spin_kernel(x_ref, o_ref):
    # c -> c / 2 + x[0, 0]: exits at once when x[0, 0] = -10, never when x[0, 0] = 1 (the
    # float carry settles at 2.0 > -1, and XLA cannot prove the loop away).
    start = x_ref[0, 0]
    c = lax.while_loop(lambda c: c > -1.0, lambda c: c * 0.5 + start, jnp.float32(0.0))
    o_ref[...] = x_ref[...] + c


def spin(x):
    return pl.pallas_call(spin_kernel, grid=(2,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


def spin_input():
    """Program (0,) ends at once; program (1,) spins for ever."""
    x = np.zeros((16, 128), np.float32)
    x[0, 0], x[8, 0] = -10.0, 1.0
    return jnp.asarray(x)


def test_a_program_that_never_ends_is_stopped_by_the_time_limit_and_the_stepper_survives():
    x = spin_input()
    st = pallaslab.step(spin, x, timeout=5)
    assert st.notes == []
    assert st.step() == (0,)
    first = st.blocks()["outputs"].written.copy()
    with pytest.raises(StepTimeLimitError, match=r"program \(1,\) did not finish within the "
                                                 r"time limit of 5 s") as info:
        st.step()
    message = str(info.value)
    assert "spin_kernel" in message and "timeout=" in message
    assert "the stepper stays after program (0,)" in message
    assert isinstance(info.value, TimeoutError)
    # Left exactly where it was.
    assert st.position == 1 and st.program == (0,)
    np.testing.assert_array_equal(st.blocks()["outputs"].written, first)
    assert st.back() is None and st.position == 0
    # The next step opens the runner again, in a fresh worker.
    assert st.goto(0) == (0,)
    np.testing.assert_array_equal(st.blocks()["outputs"].written, first)
    np.testing.assert_array_equal(st.outputs()[0][:8], first)

    fn, args = CATALOG["matmul_f32"].case()
    good = pallaslab.step(fn, *args)
    good.step(good.programs)
    assert [o.tobytes() for o in good.outputs()] == \
        [np.asarray(o).tobytes() for o in run(fn, *args, executor="interpret").outputs]


@pytest.mark.serial  # Ctrl-C is SIGINT to this process: an xdist worker ignores it
def test_ctrl_c_stops_a_spinning_program_and_the_stepper_survives():
    x = spin_input()
    st = pallaslab.step(spin, x, timeout=600)
    assert st.step() == (0,)  # the worker is warm and the runner open
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            st.step()
    finally:
        timer.cancel()
    message = str(info.value)
    assert message.startswith("stepping spin_kernel interrupted while running program (1,) "
                              "of spin_kernel after ")
    assert " s (the stepper stays after program (0,))" in message
    assert st.position == 1 and st.program == (0,)
    assert st.blocks()["args[0]"].block_index == (0, 0)
    assert st.back() is None
    assert st.step() == (0,)


def test_a_function_that_cannot_be_pickled_steps_in_this_process_with_a_note():
    fn, args = CATALOG["matmul_f32"].case()
    lock = threading.Lock()  # cloudpickle cannot send a lock

    def holds_a_lock(x, y):
        assert lock is not None
        return fn(x, y)

    st = pallaslab.step(holds_a_lock, *args)
    assert len(st.notes) == 1
    assert "programs run in this process" in st.notes[0]
    assert "lock" in st.notes[0] and "not enforced for a single program" in st.notes[0]
    st.step(st.programs)
    assert [o.tobytes() for o in st.outputs()] == \
        [np.asarray(o).tobytes() for o in run(fn, *args, executor="interpret").outputs]


def test_goto_takes_an_int_on_a_1d_grid_and_names_the_grid_when_outside_it():
    fn, args = CATALOG["elementwise_1d"].case()
    st = pallaslab.step(fn, *args)
    (g,) = st.tiling.grid
    assert st.goto(1) == (1,) and st.position == 2
    assert st.goto(np.int64(0)) == (0,) and st.goto((g - 1,)) == (g - 1,)
    with pytest.raises(ProgramOutsideGridError, match=rf"program \({g},\) is outside the "
                                                      rf"grid \({g},\)"):
        st.goto(g)
    with pytest.raises(IndexError, match=r"program \(-1,\) is outside the grid"):
        st.goto(-1)
    mm, mm_args = CATALOG["matmul_f32"].case()
    st3 = pallaslab.step(mm, *mm_args)
    with pytest.raises(ProgramOutsideGridError,
                       match=r"goto\(1\): kernel matmul_kernel has the 3-D grid \(4, 3, 2\); "
                             r"give one program id per grid dimension, e.g. goto\(\(3, 2, 1\)\)"):
        st3.goto(1)
    with pytest.raises(ProgramOutsideGridError, match=r"3-D grid"):
        st3.goto("a")


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "5", True])
def test_a_bad_time_limit_is_refused_before_anything_runs(timeout):
    fn, args = CATALOG["vector_add"].case()
    with pytest.raises(TimeoutValueError, match="a time limit is a positive number of seconds"):
        pallaslab.step(fn, *args, timeout=timeout)

"""TPU mesh kernels whose cores signal each other (issue 11): `pallaslab.step` steps their
cores together under tpu-interpret, each held at its start until stepped; a core waiting for
a signal no one sends is a `deadlock` finding, stepped or not."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from catalog import rand
from helpers import KERNELS_TPU, line_ref
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernels import CATALOG

import pallaslab
from pallaslab.execute import run
from pallaslab.execute.stepping.core_stepper import CoreStepError, CoreStepper
from pallaslab.execute.stepping.mesh_stepping import CoresSignalEachOther
from pallaslab.execute.stepping.stepper import Stepper

SIGNAL = line_ref("pl.semaphore_signal(ready, 1, core_index=1)", KERNELS_TPU)
WAIT = line_ref("pl.semaphore_wait(ready, 1)", KERNELS_TPU)


def handoff():
    fn, args = CATALOG["cross_core_handoff"].case()
    expected = np.asarray(CATALOG["cross_core_handoff"].reference(*args))
    return fn, args, expected


def _events(st):
    dma_lines = {t.source for t in st.transfers}
    return [st.event_text(e) for e in st.semaphores if e.source not in dma_lines]


def test_the_consumer_first_blocks_until_the_producer_signals_it():
    fn, args, expected = handoff()
    st = pallaslab.step(fn, *args)
    assert isinstance(st, CoreStepper) and st.programs == 2
    assert st.cores == {0: "waiting", 1: "waiting"} and st.position == 0 and not st.done
    assert any("its 2 cores signal each other" in n for n in st.notes)

    st.step(core=1)  # core 1 starts and blocks on the wait for core 0's signal
    assert st.cores == {0: "waiting", 1: "blocked"} and not st.done
    wait = st.waits[1]
    assert (wait.value, wait.count) == (1, 0) and wait.source.endswith(WAIT)
    assert f"core 1: blocked, waits on semaphore #{wait.semaphore} at {WAIT} for a count " \
           "of 1, which stays at 0" in st.describe()
    assert _events(st) == [] and st.transfers == ()
    with pytest.raises(CoreStepError, match="core 1 cannot be let go: it has started and is "
                                            "blocked"):
        st.step(core=1)

    st.step()  # core 0, the one still waiting to start: it signals, core 1 goes on
    assert st.done and st.cores == {0: "finished", 1: "finished"} and st.order == [1, 0]
    name = f"scratch[3] (semaphore #{wait.semaphore})"
    assert _events(st) == [f"core 0 signalled {name} of core 1 by 1 at {SIGNAL}",
                           f"core 1 waited on {name} for 1 at {WAIT}"]
    assert st.result.status == "ran" and not st.findings
    np.testing.assert_allclose(st.outputs()[0], expected, rtol=1e-6)
    # Each core's DMAs into the output, with the core that wrote them.
    written = [(t.core, t.dst_region) for t in st.transfers if t.dst_origin == "outputs"]
    assert written == [(0, ((0, 8), (0, 128))), (1, ((8, 16), (0, 128)))]


def test_the_producer_first_finishes_and_leaves_its_signal_for_the_consumer():
    fn, args, expected = handoff()
    st = pallaslab.step(fn, *args)
    st.step()  # core 0
    assert st.cores == {0: "finished", 1: "waiting"} and not st.done
    assert [e.kind for e in st.semaphores if e.source and e.source.endswith(SIGNAL)] == \
        ["signal"]
    assert len(_events(st)) == 1 and "core 0 signalled" in _events(st)[0]
    st.step()  # core 1: the signal is there, it runs through
    assert st.done and st.order == [0, 1]
    np.testing.assert_allclose(st.outputs()[0], expected, rtol=1e-6)


def test_stepping_every_core_runs_the_kernel_to_its_reference():
    fn, args, expected = handoff()
    st = pallaslab.step(fn, *args)
    result = st.run()
    assert st.done and st.position == 2 and result.status == "ran"
    np.testing.assert_allclose(result.outputs[0], expected, rtol=1e-6)


def test_a_lone_core_runner_says_why_it_cannot_step_them_and_what_does():
    fn, args, _ = handoff()
    with pytest.raises(CoresSignalEachOther, match=(
            r"mesh kernel _handoff cannot be stepped one core alone: its cores signal each "
            rf"other \(a semaphore signal or DMA to another core at .*{SIGNAL}\)\. "
            r"pallaslab.step\(fn, \*args\) steps its cores together under tpu-interpret")):
        Stepper(fn, args)


# --- a deadlock between cores ------------------------------------------------------------------


def _wrong_core(x_hbm, o_hbm, vbuf, dma, ready):
    core = jax.lax.axis_index("core")

    @pl.when(core == 0)
    def _wait_for_core_one():
        pl.semaphore_wait(ready, 1)  # core 0 waits for core 1

    @pl.when(core == 1)
    def _signal_the_wrong_core():
        pl.semaphore_signal(ready, 1, core_index=1)  # meant core 0: core 0 waits forever

    rows = pl.ds(core * 8, 8)
    pltpu.async_copy(x_hbm.at[rows], vbuf, dma).wait()
    pltpu.async_copy(vbuf, o_hbm.at[rows], dma).wait()


def wrong_core(x):
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)
    return pl.kernel(_wrong_core, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
                     scratch_types=[pltpu.VMEM((8, 128), jnp.float32),
                                    pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR])(x)


HERE = Path(__file__)


def test_a_core_waiting_for_a_signal_sent_elsewhere_is_a_deadlock_not_a_hang():
    result = run(wrong_core, rand((16, 128)), executor="tpu-interpret", timeout=120)
    assert result.status == "failed"
    (finding,) = [f for f in result.findings if f.code == "deadlock"]
    assert finding.severity == "error" and result.error == f"deadlock: {finding.message}"
    assert finding.message.startswith(
        "every core is blocked and none can signal again: core 0 waits on "
        "semaphore scratch[2] for a count of 1")  # `ready`, as the kernel names it
    assert "for a count of 1, which stays at 0; core 1 had finished. A signal that never " \
           "happens (a missing signal, a wrong core_index" in finding.message
    assert line_ref("# core 0 waits for core 1", HERE) in finding.message


def test_stepping_into_the_deadlock_ends_the_run_with_its_finding():
    st = pallaslab.step(wrong_core, rand((16, 128)))
    st.step(core=0)
    assert st.cores == {0: "blocked", 1: "waiting"}
    assert st.waits[0].source.endswith(line_ref("# core 0 waits for core 1", HERE))
    st.step()  # core 1 signals itself and finishes: core 0 can never go on
    assert st.done and st.cores == {0: "blocked", 1: "finished"}
    assert [f.code for f in st.findings] == ["deadlock"]
    assert st.result.status == "failed" and st.outputs() == ()
    assert _events(st) == [
        f"core 1 signalled scratch[2] (semaphore #{st.waits[0].semaphore}) by 1 at "
        f"{line_ref('core_index=1)  # meant core 0', HERE)}"]


# --- which core wrote a mismatch -------------------------------------------------------------


def test_a_mismatch_names_the_core_that_last_wrote_its_first_element():
    fn, args, _ = handoff()
    # Core 0's rows are doubled as this wrong reference says; core 1's are not.
    cmp = pallaslab.compare(fn, *args, reference=lambda x: x * 2.0)
    assert not cmp.passed and cmp.executors == ("tpu-interpret", "reference")
    store = line_ref("pltpu.async_copy(vbuf, o_hbm.at[pl.ds(8, 8)], dma).wait()", KERNELS_TPU)
    assert ("outputs of mesh kernel _handoff (tpu-interpret vs reference): 1,024 mismatched "
            f"elements; the first, (8, 0), was last written by core 1's DMA at {store}"
            ) in cmp.notes


def test_the_workbench_says_why_its_step_tab_is_not_offered():
    fn, args = CATALOG["cross_core_handoff"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    assert "step" not in [t.name for t in wb.tabs()]
    with pytest.raises(pallaslab.PallasLabError, match=r"its cores signal each other \(at .*"
                       r"kernels_tpu.py:\d+\), so they step together.*pallaslab.step"):
        wb.view("step")

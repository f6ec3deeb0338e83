"""Executors and the stepper on TPU kernels beyond BlockSpecs (issue 11): in-kernel pipelines,
manual DMAs and semaphores, run_scoped buffers, mesh kernels (tensorcore and SparseCore), the
fuser. Every kernel of the "tpu-advanced" catalog runs under TPU interpret mode and matches its
pure-JAX reference; what an interpreter cannot run is said in one line, naming why."""

import re

import jax
import numpy as np
import pytest
from catalog import catalog_names
from helpers import KERNELS_TPU, line_ref
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AbstractDevice, AbstractMesh, AxisType
from kernels import CATALOG

import pallaslab
from pallaslab.execute import ExecutorError, compare, run
from pallaslab.execute.executors.auto import evaluate
from pallaslab.model import capture

ADVANCED = catalog_names(tag="tpu-advanced")
MESH = ("mesh_kernel", "mesh_kernel_default_cores", "core_map_kernel", "sparsecore_vector_add")
# JAX's TPU interpreter lacks pl.semaphore_read: that kernel is compared under interpret.
TPU_INTERPRETER_LACKS = {"semaphore_read_kernel": "semaphore_read"}


def reference_outputs(name, args):
    return [np.asarray(x) for x in jax.tree.leaves(CATALOG[name].reference(*args))]


@pytest.mark.parametrize("name", ADVANCED)
def test_every_advanced_kernel_matches_its_reference(name):
    entry = CATALOG[name]
    fn, args = entry.case()
    executor = "interpret" if name in TPU_INTERPRETER_LACKS else "tpu-interpret"
    result = compare(fn, *args, executors=f"{executor},reference", reference=entry.reference)
    assert result.statuses[executor].status == "ran", result.statuses[executor].reason
    # The values agree; a kernel `check` fails (the catalog's expected error codes) fails the
    # comparison too, naming those codes, and nothing else does.
    static = {s.finding.code for s in result.static_findings}
    assert static <= entry.findings, static
    assert result.passed == (not static), result.verdict()
    (pair,) = [p for o in result.outputs for p in o.pairs]
    assert (pair.a, pair.b) == (executor, "reference")
    assert pair.mismatched_elements == 0 and pair.max_abs_err <= 1e-4


@pytest.mark.parametrize("name", MESH)
def test_the_hlo_interpreter_says_in_one_line_it_cannot_run_mesh_kernels(name):
    fn, args = CATALOG[name].case()
    result = run(fn, *args, executor="interpret")
    mesh = "VectorSubcoreMesh" if name == "sparsecore_vector_add" else "TensorCoreMesh"
    assert result.status == "unavailable"
    assert result.reason.startswith(
        f"the HLO interpreter cannot run mesh kernels ({mesh}); tpu-interpret can (kernel ")
    assert "\n" not in result.reason and "NameError" not in result.reason


def test_tpu_interpret_says_jax_lacks_semaphore_read_naming_the_users_line():
    fn, args = CATALOG["semaphore_read_kernel"].case()
    result = run(fn, *args, executor="tpu-interpret")
    assert result.status == "unavailable" and not result.findings
    why = result.reason
    assert "\n" not in why and "Traceback" not in why
    assert why.startswith("JAX's TPU interpreter (TPU interpret mode) does not implement "
                          "pl.semaphore_read (primitive 'semaphore_read' has no cpu lowering)")
    assert line_ref("count = pl.semaphore_read(sem)", KERNELS_TPU) in why
    assert "not a fault of the kernel" in why
    # The comparison is incomplete and says why, rather than blaming the kernel.
    cmp = compare(fn, *args, executors="tpu-interpret,reference",
                  reference=CATALOG["semaphore_read_kernel"].reference)
    assert not cmp.complete and "does not implement pl.semaphore_read" in cmp.verdict()


def test_default_executors_choose_one_that_runs_the_kernel_and_say_which():
    fn, args = CATALOG["mesh_kernel"].case()
    cmp = compare(fn, *args, reference=CATALOG["mesh_kernel"].reference)
    assert cmp.executors == ("tpu-interpret", "reference") and cmp.passed
    assert cmp.notes == ("executors chosen by default: tpu-interpret, reference (the HLO "
                         "interpreter cannot run mesh kernels (TensorCoreMesh); tpu-interpret "
                         "can (kernel _triple_my_rows))",)
    assert cmp.to_json()["notes"] == list(cmp.notes)
    with pytest.raises(ExecutorError, match=r"only tpu-interpret can run these kernels here "
                       r"\(the HLO interpreter cannot run mesh kernels .*pass reference=my_ref"):
        compare(fn, *args)
    fn, args = CATALOG["manual_dma_double_buffer"].case()
    cmp = compare(fn, *args)
    assert cmp.executors == ("vectorized", "tpu-interpret") and cmp.passed
    assert cmp.notes == ("executors chosen by default: vectorized, tpu-interpret",)
    assert cmp.result("vectorized").notes[0].startswith(
        "vectorized fell back to interpret for _double_buffered_copy: the body uses DMAs")


def test_run_without_an_executor_chooses_one_that_runs_the_kernel():
    fn, args = CATALOG["mesh_kernel"].case()
    result = run(fn, *args)
    assert result.executor == "tpu-interpret" and result.status == "ran"
    assert result.notes[0] == ("executor chosen by default: tpu-interpret (the HLO interpreter "
                               "cannot run mesh kernels (TensorCoreMesh); tpu-interpret can "
                               "(kernel _triple_my_rows))")
    fn, args = CATALOG["run_scoped_sync_copy"].case()
    result = run(fn, *args)
    assert result.executor == "vectorized" and result.status == "ran"
    assert result.notes == ("vectorized fell back to interpret for _scoped_increment: the body "
                            "uses DMAs (make_async_copy / emit_pipeline) (`dma_start`): only "
                            "the interpreter runs it program by program (within the time "
                            "limit)",)


def test_the_value_of_a_mesh_kernel_call_comes_from_tpu_interpret_with_a_note():
    fn, args = CATALOG["core_map_kernel"].case()
    ev = evaluate(capture(fn, *args))
    assert ev.ok and ev.executor == "tpu-interpret"
    assert ev.note == ("pallaslab: no TPU/GPU attached: ran 1 kernel under TPU interpret mode "
                       "(the HLO interpreter cannot run mesh kernels (TensorCoreMesh); "
                       "tpu-interpret can (kernel _per_core))")
    np.testing.assert_array_equal(np.asarray(ev.outputs[0]), reference_outputs(
        "core_map_kernel", args)[0])


def test_kernels_traced_under_an_abstract_tpu_run_in_the_worker():
    fn, args = CATALOG["mesh_kernel_default_cores"].case()
    cap = capture(fn, *args)
    assert cap[0].traced_for_chip == "v5e" and cap[0].grid == (1,)  # one core on v5e
    result = run(fn, *args, executor="tpu-interpret")
    assert result.status == "ran" and not result.notes  # ran in the worker process
    np.testing.assert_array_equal(result.outputs[0], np.asarray(args[0]) * 2.0)


def test_the_callers_own_abstract_mesh_reaches_the_worker():
    fn, args = CATALOG["mesh_kernel_default_cores"].case()
    device = AbstractDevice(device_kind="TPU v6 lite", num_cores=1, platform="tpu")
    mesh = AbstractMesh((1,), ("x",), (AxisType.Auto,), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        result = run(fn, *args, executor="tpu-interpret")
    assert result.status == "ran" and not result.notes, result.reason
    np.testing.assert_array_equal(result.outputs[0], np.asarray(args[0]) * 2.0)


# -- the stepper -------------------------------------------------------------------------------


def test_a_mesh_kernel_steps_core_by_core():
    fn, args = CATALOG["mesh_kernel"].case()
    x = np.asarray(args[0])
    st = pallaslab.step(fn, *args)
    assert st.programs == 2 and st.tiling.grid == (2,)
    assert any(n.startswith("mesh kernel _triple_my_rows: each program is one core of its "
                            "TensorCoreMesh (core=2) (program ids = mesh coordinates)")
               for n in st.notes)
    assert st.step() == (0,)
    out = st.blocks()["outputs"]
    assert out.block_index == (0, 0) and out.start == (0, 0) and out.changed  # whole array
    np.testing.assert_array_equal(out.written[:8], x[:8] * 3.0)  # core 0: its own rows
    assert np.isnan(out.written[8:]).all()  # core 1's rows: not written yet
    vbuf, _sem = st.scratch()
    np.testing.assert_array_equal(vbuf, x[:8] * 3.0)  # core 0's VMEM scratch
    assert st.step() == (1,)
    np.testing.assert_array_equal(st.scratch()[0], x[8:] * 3.0)  # core 1's own VMEM
    np.testing.assert_array_equal(st.outputs()[0], x * 3.0)
    eqs = st.equations()  # core 1: axis_index("core") is 1, on the user's line
    rows = eqs[0]
    assert rows.source.endswith(line_ref("rows = pl.ds(jax.lax.axis_index", KERNELS_TPU))
    assert int(rows.outputs[0]) == 8
    assert st.back() == (0,)
    assert np.isnan(st.outputs()[0][8:]).all()
    assert st.goto(1) == (1,) and st.done


def test_core_map_inside_run_state_steps_per_core():
    fn, args = CATALOG["core_map_kernel"].case()
    x = np.asarray(args[0])
    st = pallaslab.step(fn, *args)
    assert st.programs == 2
    st.step()
    y = st.blocks()["args[1]"].written  # the ref run_state initialised with zeros
    np.testing.assert_array_equal(y[:8], x[:8] + 1.0)
    np.testing.assert_array_equal(y[8:], 0.0)
    st.step()
    np.testing.assert_array_equal(st.blocks()["args[1]"].written, x + 1.0)


def test_a_sparsecore_kernel_steps_per_subcore():
    fn, args = CATALOG["sparsecore_vector_add"].case()
    st = pallaslab.step(fn, *args)
    assert st.tiling.grid == (1, 16) and st.programs == 16
    assert st.step() == (0, 0) and st.blocks()["outputs"].changed  # subcore 0 writes
    for _ in range(15):
        st.step()
        assert not st.blocks()["outputs"].changed  # the others leave it alone
    np.testing.assert_array_equal(st.outputs()[0], np.arange(16) + 1)


@pytest.mark.parametrize("name", ["manual_dma_double_buffer", "run_scoped_sync_copy",
                                  "semaphore_read_kernel"])
def test_pallas_calls_with_manual_dmas_and_semaphores_step(name):
    fn, args = CATALOG[name].case()
    st = pallaslab.step(fn, *args)
    assert st.programs == 1 and st.step() == ()
    np.testing.assert_allclose(st.outputs()[0], reference_outputs(name, args)[0], rtol=1e-6)
    eqs = st.equations()
    assert eqs and all(e.source is None or re.search(r"\.py:\d+$", e.source) for e in eqs)
    assert any(e.source and "kernels_tpu.py" in e.source for e in eqs)


def _signalling_cores(x_hbm, o_hbm, sem):
    core = jax.lax.axis_index("core")

    @pl.when(core == 0)
    def _signal_core_one():
        pl.semaphore_signal(sem, 1, core_index=1)

    @pl.when(core == 1)
    def _wait_for_core_zero():
        pl.semaphore_wait(sem, 1)

    rows = pl.ds(core * 8, 8)
    pltpu.sync_copy(x_hbm.at[rows], o_hbm.at[rows])


def signalling_cores(x):
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)
    return pl.kernel(_signalling_cores, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                     mesh=mesh, scratch_types=[pltpu.SemaphoreType.REGULAR])(x)


def test_cores_that_signal_each_other_run_whole_and_step_together():
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    result = run(signalling_cores, x, executor="tpu-interpret")
    assert result.status == "ran"
    np.testing.assert_array_equal(result.outputs[0], x)
    # Stepped core by core with the cores running together (tests/execute/test_cross_core.py).
    st = pallaslab.step(signalling_cores, x)
    assert type(st).__name__ == "CoreStepper" and st.cores == {0: "waiting", 1: "waiting"}
    np.testing.assert_array_equal(st.run().outputs[0], x)


def test_a_fused_kernel_runs_in_the_worker_process():
    # fuser.fuse's wrapper refers to JAX config options: they travel by name.
    fn, args = CATALOG["fused_scale_add"].case()
    result = run(fn, *args, executor="interpret")
    assert result.status == "ran" and not result.notes, result.notes
    np.testing.assert_allclose(result.outputs[0], reference_outputs("fused_scale_add", args)[0],
                               rtol=1e-5)


@pytest.mark.parametrize("name", ADVANCED)
def test_every_advanced_kernel_steps_to_its_reference(name):
    fn, args = CATALOG[name].case()
    st = pallaslab.step(fn, *args)
    st.step(st.programs)
    assert st.done
    # core_map_kernel writes the ref pl.run_state made (its args[1]); the others an output.
    written = st.outputs() or (st.blocks()["args[1]"].written,)
    expected = reference_outputs(name, args)[0]
    np.testing.assert_allclose(written[0], expected, rtol=1e-5,
                               atol=1e-5 * float(np.abs(expected).max()))

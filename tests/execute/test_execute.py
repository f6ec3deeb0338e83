"""Executors: the whole catalog under every executor, interpreter findings, debug_print
attribution, abstract arguments, and the device executor's unavailable path."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from kernels import CATALOG, abstract

import pallaslab
from pallaslab.errors import UnavailableError
from pallaslab.execute import EXECUTOR_NAMES, ExecutorError, run
from pallaslab.execute.data import concretize
from pallaslab.execute.executors.device import DeviceExecutor, require_device

# The interpreters stop on these kernels' bugs; the finding each must report instead.
STOPS = {
    ("out_of_bounds_block", "tpu-interpret"): "out-of-bounds-read",
    ("output_revisit_clobber", "tpu-interpret"): "output-revisit",
    ("missing_signal", "tpu-interpret"): "deadlock",  # one device waiting for itself
}
# The result depends on a race (2 simulated cores; a DMA racing a store).
RACY = {"racy_parallel_accumulate", "remote_write_race"}
# Kernels an interpreter legitimately cannot run, and what its status must say.
MOSAIC_GPU_TMA = ("tma_scale", "tma_blocks", "warp_specialized", "gpu_emit_pipeline",
                  "gpu_emit_pipeline_out_specs")
CANNOT_RUN = {
    **{(name, "interpret"): r"^the HLO interpreter cannot run kernels that communicate between "
       r"devices \(remote DMAs, semaphore signals to a device\); tpu-interpret can"
       for name in ("right_permute", "ring_all_gather", "ring_all_gather_wrong_neighbour",
                    "remote_write_race")},
    **{(name, "interpret"): r"^the HLO interpreter cannot run mesh kernels \((TensorCore|"
       r"VectorSubcore)Mesh\); tpu-interpret can"
       for name in ("mesh_kernel", "mesh_kernel_default_cores", "core_map_kernel",
                    "sparsecore_vector_add", "cross_core_handoff")},
    ("gpu_mesh_kernel", "tpu-interpret"):
        r"^kernel body is a mosaic_gpu mesh kernel \(Mesh\): .* gpu-interpret runs Mosaic GPU",
    ("semaphore_read_kernel", "tpu-interpret"):
        r"^JAX's TPU interpreter \(TPU interpret mode\) does not implement pl\.semaphore_read",
    **{(name, "tpu-interpret"): r"^kernel \w+ has triton compiler params: TPU interpret mode "
       r"needs TPU \(or no\) compiler params"
       for name in ("masked_vector_add", "masked_row_softmax", "atomic_block_sums",
                    "atomic_exchange", "overlapping_stores")},
    **{(name, "interpret"): r"^JAX's HLO interpreter \(interpret=True\) does not implement "
       r"what the kernel uses: No state discharge rule implemented for primitive: "
       r"copy_gmem_to_smem$" for name in MOSAIC_GPU_TMA if name != "warp_specialized"},
    ("warp_specialized", "interpret"): r"^JAX's HLO interpreter \(interpret=True\) does not "
                                       r"implement what the kernel uses: run_scoped interpret "
                                       r"rule does not support collective axes$",
    **{(name, "tpu-interpret"): r"^kernel \w+ is a mosaic_gpu mesh kernel \(Mesh\): .* "
       r"gpu-interpret runs Mosaic GPU ones$" for name in MOSAIC_GPU_TMA},
    ("mosaic_gpu_pallas_call", "tpu-interpret"): r"^kernel _add_one has mosaic_gpu compiler "
                                                 r"params: TPU interpret mode needs TPU",
}


@functools.cache
def interpreted(name):
    fn, args = CATALOG[name].case()
    return run(fn, *args, executor="interpret")


@pytest.mark.parametrize("executor", ["interpret", "tpu-interpret", "gpu-interpret", "device"])
@pytest.mark.parametrize("name", list(CATALOG))
def test_catalog_under_every_executor(name, executor):
    fn, args = CATALOG[name].case()
    result = run(fn, *args, executor=executor)
    if (name, executor) in CANNOT_RUN:
        assert result.status == "unavailable", result.reason
        assert re.search(CANNOT_RUN[name, executor], result.unavailable), result.unavailable
        assert "\n" not in result.unavailable and "Traceback" not in result.unavailable
        return
    if result.unavailable:
        assert executor in ("gpu-interpret", "device"), result.unavailable
        pytest.skip(f"{executor} cannot run {name}: {result.unavailable}")
    if (name, executor) in STOPS:
        assert not result.ok
        assert [f.code for f in result.findings] == [STOPS[name, executor]]
        return
    assert result.ok, result.error
    assert result.wall_time > 0 and len(result.outputs) == len(result.output_info)
    reference = CATALOG[name].reference
    if reference is not None:  # the catalog's pure-JAX function says what is right
        expected = [np.asarray(x) for x in jax.tree.leaves(reference(*args))]
    else:
        base = interpreted(name)
        assert base.ok, base.error
        expected = list(base.outputs)
    if name in RACY and executor != "interpret":
        return
    for ours, theirs in zip(result.outputs, expected, strict=True):
        # Summation order differs from the reference's: rounding scales with the values.
        scale = float(np.nanmax(np.abs(theirs), initial=1.0)) if theirs.size else 1.0
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * scale, equal_nan=True)


def test_every_executor_has_a_name_and_unknown_names_are_rejected():
    assert EXECUTOR_NAMES == ("interpret", "tpu-interpret", "gpu-interpret", "vectorized",
                              "device", "reference")
    fn, args = CATALOG["elementwise_1d"].case()
    with pytest.raises(ExecutorError, match="unknown executor 'tpu'; the executors are: "
                                            "interpret, tpu-interpret"):
        run(fn, *args, executor="tpu")


def test_tpu_interpret_reports_the_race_with_operand_and_programs():
    fn, args = CATALOG["racy_parallel_accumulate"].case()
    result = run(fn, *args, executor="tpu-interpret")
    races = [f for f in result.findings if f.code == "data-race"]
    assert races, result.findings
    race = races[0]
    assert race.operand == "outputs" and race.severity == "error"
    assert len(race.programs) == 2 and race.programs[0] != race.programs[1]
    assert all(len(p) == 1 and 0 <= p[0] < 4 for p in race.programs)
    assert "row_sum_kernel: outputs: data race between programs" in race.message
    assert "run at the same time" in race.message
    # The interpret executor (no memory model) sees nothing.
    assert not run(fn, *args, executor="interpret").findings


def test_tpu_interpret_reports_the_out_of_bounds_read():
    fn, args = CATALOG["out_of_bounds_block"].case()
    result = run(fn, *args, executor="tpu-interpret")
    (oob,) = result.findings
    assert oob.code == "out-of-bounds-read" and oob.operand == "args[0]"
    assert oob.programs == ((3,),) and oob.blocks == ((4, 0),)
    assert oob.message.startswith("scale_kernel: args[0]: program (3,) reads block (4, 0), "
                                  "elements [(slice(256, 320, 1), slice(0, 128, 1))], outside "
                                  "the array of shape (256, 128).")
    assert result.outputs is None and "Out-of-bounds block index (4, 0)" in result.error
    # The interpreter's state was reset: the next run works.
    fn, args = CATALOG["elementwise_1d"].case()
    assert run(fn, *args, executor="tpu-interpret").ok


def test_tpu_interpret_reports_a_revisited_output_block():
    fn, args = CATALOG["output_revisit_clobber"].case()
    (f,) = run(fn, *args, executor="tpu-interpret").findings
    assert f.code == "output-revisit" and f.operand == "outputs" and f.programs == ((2,),)


def print_kernel(x_ref, o_ref):
    # (program_id itself inside pl.when does not lower under interpret=True: a JAX limit.)
    i, n = pl.program_id(0), pl.num_programs(0)

    @pl.when(i % 2 == 1)
    def _():
        pl.debug_print("odd program {} of {}", i, n)

    pl.debug_print("sum {}", jnp.sum(x_ref[...]).astype(jnp.int32))
    o_ref[...] = x_ref[...] + 1


def printing(x):
    return pl.pallas_call(
        print_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)


@pytest.mark.parametrize("executor", ["interpret", "tpu-interpret"])
def test_debug_print_is_attributed_to_the_program_that_printed(executor, capsys):
    x = jnp.repeat(jnp.arange(4, dtype=jnp.float32), 8)[:, None] * jnp.ones((32, 128))
    result = run(printing, x, executor=executor)
    by_program = result.prints_by_program(0)
    assert dict(by_program) == {
        (0,): ["sum 0"],
        (1,): ["odd program 1 of 4", "sum 1024"],
        (2,): ["sum 2048"],
        (3,): ["odd program 3 of 4", "sum 3072"],
    }
    assert capsys.readouterr().out == ""  # captured, not printed


def test_abstract_arguments_get_seeded_random_data():
    fn, args = CATALOG["matmul_f32"].case()
    a = run(fn, *abstract(args))
    b = run(fn, *abstract(args))
    assert a.ok and np.array_equal(a.outputs[0], b.outputs[0])
    x = a.inputs[0]
    assert x.shape == (512, 256) and x.dtype == np.float32
    assert abs(float(x.mean())) < 0.05 and 0.9 < float(x.std()) < 1.1  # standard normal
    np.testing.assert_allclose(a.outputs[0], a.inputs[0] @ a.inputs[1], rtol=1e-4, atol=1e-3)
    ints = concretize((jax.ShapeDtypeStruct((1000,), jnp.int32),))[0]
    assert int(ints.min()) >= 0 and int(ints.max()) < 8
    c = run(fn, *abstract(args), seed=1)
    assert not np.array_equal(c.inputs[0], x)


def test_abstract_scalar_prefetch_indices_stay_in_range():
    fn, args = CATALOG["scalar_prefetch_gather"].case()
    result = run(fn, *abstract(args), executor="tpu-interpret")
    assert result.ok, result.error  # out_of_bounds_reads="raise" would have stopped it
    idx = result.inputs[0]
    assert idx.min() >= 0 and idx.max() < 4 and len(set(idx.tolist())) > 1


def test_library_kernel_that_hard_codes_interpret_false_runs_interpreted():
    from jax.experimental.pallas.ops.tpu import matmul as tpu_matmul

    x = jnp.ones((256, 256), jnp.float32)
    result = run(lambda a, b: tpu_matmul.matmul(a, b, block_shape=(128, 128)), x, x,
                 executor="interpret")
    assert result.ok, result.error
    np.testing.assert_allclose(result.outputs[0], np.full((256, 256), 256.0))


def test_a_lone_kernel_runs_on_its_operands():
    fn, args = CATALOG["two_kernels"].case()
    softmax = pallaslab.capture(fn, *args)[1]
    result = run(softmax, executor="tpu-interpret")  # abstract operands -> random data
    assert result.ok and result.outputs[0].shape == (256, 512)
    np.testing.assert_allclose(result.outputs[0].sum(axis=1), 1.0, rtol=1e-5)


def test_device_executor_reports_itself_unavailable_here():
    fn, args = CATALOG["elementwise_1d"].case()
    reason = DeviceExecutor().unavailable()
    assert reason.startswith("no TPU or GPU is attached: the JAX backends here are cpu")
    result = run(fn, *args, executor="device")
    assert not result.ok and result.unavailable == reason and result.outputs is None
    with pytest.raises(UnavailableError, match="the device executor is unavailable: no TPU"):
        require_device()


def test_device_executor_runs_on_a_given_device():
    # The CPU stands in for an accelerator: kernels are bound with interpret=False, so only a
    # kernel that needs no Mosaic/Triton lowering (none) could run; a reference-free check is
    # that the executor reports the lowering error rather than hiding it.
    fn, args = CATALOG["elementwise_1d"].case()
    result = run(fn, *args, executor=DeviceExecutor(jax.devices("cpu")[0]))
    assert result.status == "failed" and result.outputs is None
    assert re.search(r"(?i)pallas|mosaic|triton|interpret", result.error)


def test_reference_executor_and_its_signature_check():
    fn, args = CATALOG["elementwise_1d"].case()
    result = run(fn, *args, executor="reference", reference=lambda x: x * 2.0)
    np.testing.assert_array_equal(result.outputs[0], np.asarray(args[0]) * 2.0)
    missing = run(fn, *args, executor="reference")
    assert missing.unavailable.startswith("no reference function was given")
    two = run(fn, *args, executor="reference", reference=lambda x: (x, x))
    assert two.status == "failed" and "returned 2 array(s)" in two.error

"""Every finding code has a kernel that triggers it and kernels that do not."""

import jax
import jax.numpy as jnp
import pytest
from catalog import catalog_line
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernels import CATALOG, abstract, rand

import pallaslab
from pallaslab.analysis.findings import find, tpu_block_shape
from pallaslab.analysis.inspection import inspect_capture, inspect_kernel
from pallaslab.analysis.tiling import tile


def findings_of(name, *, backend=None):
    fn, args = CATALOG[name].case()
    out = []
    for insp in inspect_capture(pallaslab.capture(fn, *args), backend=backend):
        out.extend(insp.findings)
    return out


@pytest.mark.parametrize("name", list(CATALOG))
def test_catalog_raises_exactly_its_expected_codes(name):
    codes = {f.code for f in findings_of(name) if f.severity in ("error", "warning")}
    assert codes == set(CATALOG[name].findings)


def test_parallel_write_conflict_names_the_racing_programs():
    (f,) = findings_of("racy_parallel_accumulate")
    assert f.code == "parallel-write-conflict" and f.severity == "error"
    assert f.operand == "outputs"
    assert f.programs == ((0,), (1,), (2,), (3,))
    assert f.blocks == ((0, 0),)
    assert 'grid dimension(s) 0 are marked "parallel"' in f.message
    assert "all write output block (0, 0)" in f.message


def test_arbitrary_reduction_is_not_a_tpu_race_but_is_one_on_gpu():
    assert findings_of("reduction_revisited_output") == []
    gpu = findings_of("reduction_revisited_output", backend="triton")
    assert [f.code for f in gpu] == ["parallel-write-conflict"]
    assert "on GPU every program may run concurrently" in gpu[0].message


def test_matmul_accumulation_is_clean_on_tpu_and_racy_on_gpu():
    assert findings_of("matmul_f32") == []
    codes = {f.code for f in findings_of("matmul_f32", backend="triton")}
    assert codes == {"parallel-write-conflict"}


def test_uncovered_output_message_and_blocks():
    (f,) = findings_of("uncovered_output")
    assert f.code == "uncovered-output" and f.severity == "error"
    assert f.message.startswith("outputs: 16384 of 32768 elements (50.0%) are never written")
    assert "starting at element (128, 0)" in f.message
    assert f.blocks == ((2, 0), (3, 0))


def test_uncovered_output_of_aliased_buffer_is_only_info():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def fn(x):
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)),
            input_output_aliases={0: 0},
        )(x)

    (k,) = pallaslab.capture(fn, rand((128, 128)))
    (f,) = find(k, tile(k))
    assert (f.code, f.severity) == ("uncovered-output", "info")
    assert "keep the values of the aliased input args[0]" in f.message


def test_out_of_bounds_block_names_program_and_block():
    (f,) = findings_of("out_of_bounds_block")
    assert (f.code, f.operand, f.programs, f.blocks) == (
        "block-out-of-bounds", "args[0]", ((3,),), ((4, 0),))
    assert "program (3,) gets block index (4, 0), which starts at element (256, 0)" in f.message


def test_negative_block_index_is_out_of_bounds():
    def fn(x):
        return pl.pallas_call(
            lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(2,), in_specs=[pl.BlockSpec((64, 128), lambda i: (i - 1, 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)))(x)

    (k,) = pallaslab.capture(fn, rand((128, 128)))
    codes = [(f.code, f.programs) for f in find(k, tile(k))]
    assert ("block-out-of-bounds", ((0,),)) in codes


def test_partial_block_says_what_pallas_does():
    fs = findings_of("partial_blocks")
    assert {f.operand for f in fs} == {"args[0]", "args[1]", "outputs"}
    f = next(f for f in fs if f.operand == "outputs")
    assert f.severity == "info" and f.programs == ((3, 0), (3, 1))
    assert "by 56 rows (block (64, 128)): Pallas pads its reads and drops its writes" in f.message


def test_output_revisit_names_the_revisiting_program():
    (f,) = findings_of("output_revisit_clobber")
    assert (f.code, f.severity, f.programs) == ("output-revisit", "error", ((2,), (3,)))
    assert "block (0, 0) is left and written back, then revisited at program (2,)" in f.message
    # On GPU there is no write-back to clobber, but the two writers of block (0, 0) race.
    gpu = findings_of("output_revisit_clobber", backend="triton")
    assert [(f.code, f.programs) for f in gpu] == [("parallel-write-conflict", ((0,), (2,)))]


def test_tpu_block_shape_message():
    fs = findings_of("tpu_misaligned")
    assert [f.operand for f in fs] == ["args[0]", "args[1]", "outputs"]
    assert fs[0].message == (
        "args[0]: block shape (10, 100) of the float32 array (40, 200) breaks the TPU tiling "
        "rule (the last two block dimensions must be divisible by 8 and 128 respectively, or "
        "equal the array's): the last block dim 100 is neither a multiple of 128 nor the "
        "array's 200; the second-last block dim 10 is neither a multiple of 8 nor the "
        "array's 40.")
    assert findings_of("tpu_misaligned", backend="triton") == []


@pytest.mark.parametrize(("block", "dtype", "ok"), [
    ((1024,), jnp.float32, True), ((8192,), jnp.float32, True), ((256,), jnp.float32, True),
    ((256,), jnp.bfloat16, True), ((128,), jnp.bfloat16, False), ((300,), jnp.float32, False),
])
def test_rank1_tpu_rule(block, dtype, ok):
    def fn(x):
        return pl.pallas_call(
            lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(1,), in_specs=[pl.BlockSpec(block, lambda i: (i,))],
            out_specs=pl.BlockSpec(x.shape, lambda i: (0,)))(x)

    (k,) = pallaslab.capture(fn, jax.ShapeDtypeStruct((16384,), dtype))
    assert (tpu_block_shape(k.operands[0]) is None) == ok


def test_tiling_unavailable_is_an_info_finding():
    fn, args = CATALOG["scalar_prefetch_gather"].case()
    (k,) = pallaslab.capture(fn, *abstract(args))
    (f,) = find(k, tile(k))
    assert (f.code, f.severity) == ("tiling-unavailable", "info")
    assert "pass concrete arrays" in f.message


def test_smem_and_any_operands_are_exempt_from_the_tpu_rule():
    def kernel(x_ref, s_ref, o_ref):
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    def fn(x, s):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY),
                      pl.BlockSpec(memory_space=pltpu.SMEM)],
        )(x, s)

    (k,) = pallaslab.capture(fn, rand((10, 100)), jnp.zeros((3,), jnp.int32))
    assert [f.code for f in find(k, tile(k))] == []


def test_tpu_buffer_count_names_the_operand_value_and_rule():
    (f,) = findings_of("buffered_three")
    assert (f.code, f.severity, f.operand) == ("tpu-buffer-count", "error", "args[0]")
    assert f.message.startswith(
        "args[0] (x_ref): pipeline_mode=pl.Buffered(3) asks for 3 buffers, but Mosaic TPU's "
        "pallas_call pipeline supports only single (1) and double (2) buffering")
    assert "Rule: pl.Buffered(1) or pl.Buffered(2) in a TPU pallas_call" in f.message
    assert findings_of("buffered_three", backend="triton") == []


def test_tpu_mixed_element_names_the_blocked_dims():
    (f,) = findings_of("mixed_element_blocked")
    assert (f.code, f.severity, f.operand) == ("tpu-mixed-element", "error", "args[0]")
    assert f.message.startswith(
        "args[0] (x_ref): block shape (pl.Element(64), 128) mixes pl.Element dimensions with "
        "non-Element ones (dim 1 (blocked 128)); Mosaic TPU rejects it")
    assert "Rule: make every block dimension pl.Element (or squeezed), or none" in f.message


def test_element_with_squeezed_dims_is_allowed():
    def fn(x):
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]),
            out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((None, pl.Element(8), pl.Element(128)),
                                   lambda i: (i, 0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)))(x)

    (k,) = pallaslab.capture(fn, rand((4, 8, 128)))
    assert "tpu-mixed-element" not in [f.code for f in find(k, tile(k))]


def _bounded_overrun(x_hbm, o_hbm):
    # Windows of 16 rows at rows 0, 16, 32, 48 copied from HBM into buffers of a
    # BoundedSlice of at most 8 rows: too long.
    spec = pl.BlockSpec((pl.BoundedSlice(8), 128), lambda i: (pl.ds(i * 16, 16), 0))

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    pltpu.emit_pipeline(body, grid=(4,), in_specs=spec, out_specs=spec)(x_hbm, o_hbm)


def test_a_bounded_slice_longer_than_its_bound_is_out_of_bounds():
    def fn(x):
        return pl.pallas_call(
            _bounded_overrun, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY))(x)

    [kernel] = pallaslab.capture(fn, rand((64, 128))).kernels
    [pipeline] = kernel.pipelines
    found = {f.operand: f for f in inspect_kernel(pipeline).findings
             if f.code == "block-out-of-bounds"}
    assert set(found) == {"args[0]", "outputs"}
    f = found["args[0]"]
    assert f.severity == "error" and f.programs == ((0,), (1,), (2,), (3,))
    assert f.message.startswith("args[0]: 4 program(s) use a block outside the array (64, 128)")


def _rows_per_program(x_hbm, o_hbm):
    i = pl.program_id(0)
    spec = pl.BlockSpec((8, 128), lambda j: (i * 4 + j, 0))

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    pltpu.emit_pipeline(double, grid=(4,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)


def test_parallel_programs_writing_an_hbm_output_through_their_own_pipelines_do_not_race():
    """Each "parallel" program pipelines its own rows into the HBM output: the output's
    whole-array window is no evidence of a shared write."""
    def fn(x):
        return pl.pallas_call(
            _rows_per_program, grid=(2,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x)

    [insp] = inspect_capture(pallaslab.capture(fn, rand((64, 128))))
    assert not [f for f in insp.findings if f.code == "parallel-write-conflict"]


def _forgets_its_program(x_hbm, o_hbm):
    spec = pl.BlockSpec((8, 128), lambda j: (j, 0))  # every program: rows 0-31 only

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    pltpu.emit_pipeline(double, grid=(4,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)


def test_a_nested_pipeline_leaving_the_kernels_output_half_unwritten_warns():
    def fn(x):
        return pl.pallas_call(
            _forgets_its_program, grid=(2,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY))(x)

    [kernel] = pallaslab.capture(fn, rand((64, 128))).kernels
    [f] = [f for f in inspect_kernel(kernel.pipelines[0]).findings
           if f.code == "uncovered-output"]
    assert f.severity == "warning" and f.message.startswith(
        "outputs: 4096 of 8192 elements (50.0%) are never written by any program")
    assert f.message.endswith("they keep what the kernel left in outputs.")


def _first_half_rows(x):
    """Writes output rows 0-7 of 16 (one program): the other rows are left unwritten."""
    return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]), grid=(1,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                          out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype))(x)


def _rows_kept(x):
    out = _first_half_rows(x)
    keep = jnp.arange(16)[:, None] < 8
    return jnp.where(keep, out, 0.0)  # rows 8-15 selected away, as megablox gmm does


def test_output_selected_away_after_the_kernel_is_a_warning_naming_the_select():
    [uncovered] = [f for f in pallaslab.inspect(_rows_kept, rand((16, 128))).findings
                   if f.code == "uncovered-output"]
    assert uncovered.severity == "warning"
    line = catalog_line("return jnp.where(keep, out, 0.0)", "test_findings.py")
    assert (f"they hold whatever was in memory (garbage on TPU/GPU), but every use of the "
            f"output goes through a select (jnp.where) at {line}: harmless if its mask drops "
            "exactly these elements") in uncovered.message
    # used otherwise too (here: summed): an error, as before
    [plain] = [f for f in pallaslab.inspect(lambda x: _first_half_rows(x).sum(),
                                            rand((16, 128))).findings
               if f.code == "uncovered-output"]
    assert plain.severity == "error" and "select" not in plain.message

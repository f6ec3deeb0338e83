"""VMEM/SMEM occupancy by hand: padding per dtype, buffer counts, scratch, limits, GPU."""

import functools

import jax
import jax.numpy as jnp
import pytest
from helpers import kernel_of
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernels import matmul

import pallaslab
from pallaslab.analysis.chips import chip
from pallaslab.analysis.occupancy import occupancy, padded_shape, vmem_section
from pallaslab.analysis.occupancy_gpu import gpu_occupancy
from pallaslab.analysis.vmem_findings import vmem_findings

S = jax.ShapeDtypeStruct
KiB = 1024


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def copy(shape, block, dtype, **spec_kw):
    def fn(x):
        return pl.pallas_call(
            copy_kernel, out_shape=S(x.shape, x.dtype), grid=(shape[0] // block[0],),
            in_specs=[pl.BlockSpec(block, lambda i: (i, 0), **spec_kw)],
            out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
        )(x)

    return pallaslab.capture(fn, S(shape, dtype))[0]


def test_f32_matmul_by_hand():
    occ = occupancy(kernel_of("matmul_f32"), "v5e")  # 128^3 blocks, f32 scratch
    block = 128 * 128 * 4
    assert [(o.origin, o.buffers, o.buffer_bytes) for o in occ.operands] == [
        ("args[0]", 2, block), ("args[1]", 2, block), ("outputs", 2, block),
        ("scratch[0]", 1, block)]
    assert occ.bytes == 448 * KiB  # what libtpu needs (tests/analysis/test_vmem_fidelity.py)
    assert (occ.limit, occ.limit_source, occ.fits) == (16 * 1024 * KiB, "chip default", True)


def test_bf16_matmul_by_hand():
    occ = occupancy(kernel_of("matmul_bf16"), "v6e")
    assert occ.operand("args[0]").buffer_bytes == 128 * 128 * 2
    assert occ.operand("scratch[0]").buffer_bytes == 128 * 128 * 4  # f32 accumulator
    assert occ.bytes == 6 * 32 * KiB + 64 * KiB
    assert occ.limit == 32 * 1024 * KiB  # v6e's default scoped limit


@pytest.mark.parametrize(("dtype", "rows", "padded_rows"), [
    (jnp.int8, 64, 64),  # a multiple of int8's 32-row tile
    (jnp.int8, 48, 48),  # not a multiple of 32: (8, 128) tiles
    (jnp.int8, 3, 4),  # short: a power of two >= packing (4)
    (jnp.bfloat16, 3, 4),
    (jnp.bfloat16, 24, 24),  # bf16 tiles are (8, 128) x (2, 1) packing on v5e
    (jnp.float32, 1, 1),
    (jnp.float32, 12, 16),
])
def test_sublane_padding_per_dtype(dtype, rows, padded_rows):
    assert padded_shape((rows, 200), dtype, chip("v5e")) == (padded_rows, 256)


def test_padding_counts_in_operand_bytes():
    occ = occupancy(copy((96, 200), (24, 200), jnp.bfloat16), "v5e")
    op = occ.operand("args[0]")
    assert op.padded_shape == (24, 256)
    assert op.buffer_bytes == 24 * 256 * 2 and op.padding_bytes == 2 * 24 * 56 * 2
    int8 = occupancy(copy((128, 256), (64, 256), jnp.int8), "v5e")
    assert int8.operand("outputs").buffer_bytes == 64 * 256


def test_rank1_and_7x_tiles():
    assert padded_shape((100,), jnp.float32, chip("v5e")) == (128,)
    assert padded_shape((300,), jnp.bfloat16, chip("v5e")) == (512,)
    assert padded_shape((5000,), jnp.int8, chip("v5e")) == (5120,)
    # TPU7x tiles 16-bit types 16 rows deep.
    assert padded_shape((24, 128), jnp.bfloat16, chip("7x")) == (24, 128)
    assert padded_shape((64, 128), jnp.bfloat16, chip("tpu-7x")) == (64, 128)
    assert chip("7x").tile_rows(jnp.bfloat16) == 16


def test_buffered_one_and_constant_index_maps():
    one = occupancy(copy((512, 256), (64, 256), jnp.float32, pipeline_mode=pl.Buffered(1)))
    assert one.operand("args[0]").buffers == 1 and one.operand("outputs").buffers == 2
    assert one.bytes == 3 * 64 * 256 * 4
    ln = occupancy(kernel_of("layer_norm"), "v5e")  # w, b index maps return (0, 0)
    assert [ln.operand(o).buffers for o in ("args[0]", "args[1]", "args[2]", "outputs")] == [
        2, 1, 1, 2]
    assert ln.operand("args[1]").padded_shape == (1, 512)
    assert ln.bytes == 4 * 32 * 512 * 4 + 2 * 512 * 4


def test_single_step_grid_is_single_buffered():
    occ = occupancy(kernel_of("vector_add"), "v5e")  # no grid
    assert {o.buffers for o in occ.operands} == {1}
    assert occ.bytes == 3 * 1024 * 4


def test_scalar_prefetch_goes_to_smem():
    occ = occupancy(kernel_of("scalar_prefetch_gather"), "v5e")
    idx = occ.operand("args[0]")
    assert (idx.space, idx.bytes) == ("smem", 6 * 4)
    assert occ.smem_bytes == 24 and occ.bytes == 4 * 8 * 128 * 4


def test_semaphores_and_smem_scratch():
    def kernel(x_hbm, o_ref, buf, sem, flags):
        flags[0] = 1
        c = pltpu.make_async_copy(x_hbm.at[pl.ds(pl.program_id(0) * 64, 64)], buf, sem.at[0])
        c.start()
        c.wait()
        o_ref[...] = buf[...]

    def fn(x):
        return pl.pallas_call(
            kernel, out_shape=S(x.shape, x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((64, 256), lambda i: (i, 0)),
            scratch_shapes=[pltpu.VMEM((64, 256), jnp.float32), pltpu.SemaphoreType.DMA((2,)),
                            pltpu.SMEM((16,), jnp.int32)])(x)

    occ = occupancy(pallaslab.capture(fn, S((256, 256), jnp.float32))[0], "v5e")
    assert occ.operand("args[0]").space == "hbm"
    assert occ.semaphores == 2 and occ.smem_bytes == 64
    assert occ.bytes == 3 * 64 * 256 * 4  # output double-buffered + the VMEM scratch


def big_matmul(limit=None):
    fn = functools.partial(matmul, bm=1024, bk=1024, bn=1024)
    if limit is not None:
        params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                      vmem_limit_bytes=limit)
        fn = functools.partial(_matmul_with_params, params=params)
    return pallaslab.capture(fn, S((2048, 2048), jnp.float32), S((2048, 2048), jnp.float32))[0]


def _matmul_with_params(x, y, params):
    from kernels import matmul_kernel

    return pl.pallas_call(
        matmul_kernel, out_shape=S((2048, 2048), x.dtype), grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((1024, 1024), lambda i, j, k: (i, k)),
                  pl.BlockSpec((1024, 1024), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((1024, 1024), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((1024, 1024), jnp.float32)], compiler_params=params,
    )(x, y)


def test_limits_fit_and_vmem_section():
    k = big_matmul()  # 2 x 3 x 4 MiB + 4 MiB = 28 MiB
    assert vmem_section(k, ("v5e", "v6e")) == {
        "tpu-v5e": {"bytes": 28 << 20, "limit": 16 << 20, "fits": False},
        "tpu-v6e": {"bytes": 28 << 20, "limit": 32 << 20, "fits": True},
    }
    raised = occupancy(big_matmul(limit=64 << 20), "v5e")
    assert (raised.limit, raised.limit_source, raised.fits) == (64 << 20, "vmem_limit_bytes", True)


def test_vmem_overflow_finding_message():
    (f,) = vmem_findings(big_matmul(), ("v5e", "v6e"))
    assert (f.code, f.severity, f.operand) == ("vmem-overflow", "error", "args[0]")
    assert "matmul_kernel on TPU v5e needs 28.00 MiB of scoped VMEM but the limit is " \
        "16.00 MiB (chip default)" in f.message
    assert "vmem_limit_bytes" in f.message and "args[0] 2 x 4.00 MiB" in f.message


def test_gpu_blocks_per_sm():
    h = gpu_occupancy(shared_bytes=0, registers=32, num_warps=4, gpu="h100")
    assert (h.blocks_per_sm, h.limited_by, h.occupancy) == (16, "warps", 1.0)
    regs = gpu_occupancy(shared_bytes=0, registers=128, num_warps=8, gpu="h100")
    assert (regs.blocks_per_sm, regs.limited_by) == (2, "registers")  # 128*32*8 = 32768 regs
    smem = gpu_occupancy(shared_bytes=100 * KiB, registers=32, num_warps=4, gpu="gpu-a100")
    assert (smem.blocks_per_sm, smem.limited_by) == (1, "shared memory")
    assert not gpu_occupancy(shared_bytes=200 * KiB, registers=32, num_warps=4,
                             gpu="a100").fits


def test_unknown_chip_message():
    with pytest.raises(ValueError, match=r"unknown TPU chip 'v9': known chips are v4, v5e"):
        chip("v9")


def _doubling(rows, limit):
    """A grid of 2 over (rows, 128) f32 blocks: 4 pipeline buffers, under `vmem_limit_bytes`."""
    def fn(x):
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
            out_shape=S(x.shape, x.dtype), grid=(2,),
            in_specs=[pl.BlockSpec((rows, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((rows, 128), lambda i: (i, 0)),
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=limit))(x)

    return pallaslab.capture(fn, S((2 * rows, 128), jnp.float32))[0]


def test_a_limit_above_the_chip_is_capped_not_refused():
    # libtpu caps vmem_limit_bytes at the chip's VMEM (tests/analysis/test_findings_vs_compiler.py).
    (f,) = vmem_findings(kernel_of("vmem_limit_above_chip"), ("v5e", "v6e", "7x"))
    assert (f.code, f.severity) == ("vmem-limit-above-chip", "info")
    assert f.message.startswith("_double on TPU 7x asks for vmem_limit_bytes=104857600 "
                                "(100.00 MiB), more than the chip's 64.00 MiB of VMEM: the "
                                "compiler caps the limit at the 63.94 MiB it lets kernels use")
    occ = occupancy(kernel_of("vmem_limit_above_chip"), "7x")
    assert (occ.limit, occ.effective_limit, occ.fits) == (100 << 20, (64 << 20) - 64 * KiB, True)
    assert occupancy(kernel_of("vmem_limit_above_chip"), "v5e").effective_limit == 100 << 20


def test_buffers_beyond_the_capped_limit_overflow():
    k = _doubling(rows=17 * 2048, limit=100 << 20)  # 4 x 17 MiB = 68 MiB
    assert occupancy(k, "v6e").fits  # 128 MiB of VMEM
    (f,) = vmem_findings(k, ("v6e", "7x"))
    assert (f.code, f.severity, f.operand) == ("vmem-overflow", "error", "args[0]")
    assert "on TPU 7x needs 68.00 MiB of scoped VMEM, more than the 63.94 MiB of the chip's " \
        "64.00 MiB of VMEM the compiler lets kernels use (it caps vmem_limit_bytes=104857600 " \
        "there)" in f.message


def test_a_body_value_that_would_overflow_if_spilled_is_a_warning_and_a_cli_note(capsys):
    """JAX's flash attention in one 2048 block: 2 MiB of buffers, but 16 MiB of f32 scores in
    the body. libtpu needs 18.5 MiB of scoped VMEM for it on v5e (limit 16 MiB)."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    from pallaslab.cli import main

    q = jax.ShapeDtypeStruct((1, 1, 2048, 128), jnp.bfloat16)
    sizes = fa.BlockSizes(block_q=2048, block_k_major=2048, block_k=2048, block_b=1)
    wb = pallaslab.inspect(functools.partial(fa.flash_attention, block_sizes=sizes), q, q, q)
    [risk] = [f for f in wb.findings if f.code == "vmem-spill-risk"]  # v5e only: 18 < 32 MiB
    assert risk.severity == "warning"
    assert risk.message.startswith(
        "_flash_attention_kernel on TPU v5e: its buffers need 2.00 MiB of the 16.00 MiB "
        "scoped-VMEM limit, and its body computes a float32[2048, 2048] matrix product "
        "(16.00 MiB) that the compiler keeps in scoped VMEM too: 18.00 MiB would not fit.")
    small = fa.BlockSizes(block_q=512, block_k_major=512, block_k=512, block_b=1)
    wb = pallaslab.inspect(functools.partial(fa.flash_attention, block_sizes=small), q, q, q)
    assert not [f for f in wb.findings if f.code == "vmem-spill-risk"]
    assert main(["inspect", "tests/kernels.py:matmul_f32"]) == 0
    assert "note: the kernel body computes" not in capsys.readouterr().out
